//! The single-node metadata file: the image as JSON under `__skein_metadata/`,
//! replaced atomically (unique temp file, fdatasync, rename, directory sync). The node
//! reads it once at start, on the main thread; afterwards only the controller writes
//! it, through the engine's io_uring file path, never with blocking calls.

use std::path::{Path, PathBuf};

use skein_engine::io::dma::DmaStorage;

use super::MetadataImage;

/// Where the image lives, and how it is read and replaced.
#[derive(Debug, Clone)]
pub struct MetadataStore {
    dir: PathBuf,
    path: PathBuf,
}

impl MetadataStore {
    /// Loads the image under `data_dir`, or an empty one, and removes temp files a
    /// crash left. Blocking: for the main thread, before the shards start.
    ///
    /// # Errors
    /// A message when the file exists but cannot be read or parsed.
    pub fn open(data_dir: &Path) -> Result<(MetadataStore, MetadataImage), String> {
        let dir = data_dir.join("__skein_metadata");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?.flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let path = dir.join("image.json");
        let mut image = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<MetadataImage>(&bytes)
                .map_err(|e| format!("cannot parse {}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                MetadataImage { next_producer_id: 1000, ..Default::default() }
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        image.index_ids();
        Ok((MetadataStore { dir, path }, image))
    }

    /// Replaces the file with `image`, blocking. For the main thread at start only.
    ///
    /// # Errors
    /// A message naming the step that failed; the old file is then still in place.
    pub fn persist_blocking(&self, image: &MetadataImage) -> Result<(), String> {
        use std::io::Write;
        let fail = |e: std::io::Error| format!("cannot persist metadata in {}: {e}", self.dir.display());
        let temp = self.path.with_extension("start.tmp");
        let mut file = std::fs::File::create(&temp).map_err(fail)?;
        file.write_all(&encode(image)).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temp, &self.path).map_err(fail)?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(fail)
    }

    /// Replaces the file with `image` through io_uring; safe on an executor thread.
    ///
    /// # Errors
    /// The first failing step; the old file is then still in place.
    pub async fn persist(&self, image: &MetadataImage) -> std::io::Result<()> {
        skein_engine::io::write_whole_atomic(&DmaStorage, &self.path, &encode(image)).await
    }
}

fn encode(image: &MetadataImage) -> Vec<u8> {
    serde_json::to_vec_pretty(image).expect("a metadata image always serialises")
}

#[cfg(test)]
mod tests {
    use super::super::{MetadataRecord, TopicMeta};
    use super::*;

    // What the controller persists is what a restart loads, id index included, and a
    // temp file left by a crash is removed.
    #[test]
    fn persisted_images_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut image) = MetadataStore::open(dir.path()).unwrap();
        assert_eq!(image.next_producer_id, 1000);
        let meta = TopicMeta {
            name: "kept".into(),
            id: uuid::Uuid::new_v4(),
            partitions: 2,
            configs: [("retention.ms".to_string(), "5".to_string())].into(),
            shards: vec![0, 1],
        };
        image.apply(&[MetadataRecord::Topic(meta.clone()), MetadataRecord::ProducerIds { next: 3000 }]);
        glommio::LocalExecutorBuilder::default()
            .spawn({
                let (store, image) = (store.clone(), image.clone());
                move || async move { store.persist(&image).await.unwrap() }
            })
            .unwrap()
            .join()
            .unwrap();
        std::fs::write(dir.path().join("__skein_metadata/image.json.7.tmp"), b"torn").unwrap();
        let (_, loaded) = MetadataStore::open(dir.path()).unwrap();
        assert_eq!(loaded.topic("kept"), Some(&meta));
        assert_eq!(loaded.topic_by_id(meta.id).map(|t| t.name.as_str()), Some("kept"));
        assert_eq!((loaded.version, loaded.next_producer_id), (1, 3000));
        assert!(!dir.path().join("__skein_metadata/image.json.7.tmp").exists());
    }
}
