//! `meta.properties` in the data directory, as Kafka writes it (version 1: the
//! cluster id, the node id and the directory id), so that Kafka's tools read it:
//! `kafka-metadata-quorum add-controller` takes the directory id from it.

use crate::config::NodeConfig;

/// The cluster id and this node's directory id in `meta.properties`, written on first
/// start. The cluster id is `--cluster-id`, else random for a single node; for a
/// cluster, derived from the voters, so that every voter formats itself with the same
/// id and no separate format step is needed. The directory id is the one
/// `--initial-controllers` names for this node, else random. A file of another node or
/// another cluster, or with another directory id than `--initial-controllers` names,
/// is refused; a file an older Skein wrote gains the node id and a directory id.
pub fn identity(config: &NodeConfig) -> Result<(String, String), String> {
    let (data_dir, node_id, voters) = (&config.data_dir, config.node_id, &config.controller_voters);
    let path = data_dir.join("meta.properties");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|l| l.strip_prefix('='))).map(|v| v.trim().to_string())
    };
    if let (Some(recorded), Some(given)) = (field("cluster.id"), &config.cluster_id) {
        if recorded != *given {
            return Err(format!("{} belongs to cluster {recorded}, not --cluster-id {given}", path.display()));
        }
    }
    let id = field("cluster.id").or_else(|| config.cluster_id.clone()).unwrap_or_else(|| match voters.is_empty() {
        true => uuid::Uuid::new_v4().simple().to_string()[..22].to_string(),
        false => skein_control::metadata::log::cluster_id_of(voters),
    });
    if let Some(recorded) = field("node.id").filter(|n| *n != node_id.to_string()) {
        return Err(format!("{} belongs to node {recorded}, not node {node_id}", path.display()));
    }
    if let (Some(recorded), Some(given)) = (field("directory.id"), &config.directory_id) {
        if recorded != *given {
            return Err(format!(
                "{} has directory id {recorded}, but --initial-controllers names {given} for node {node_id}",
                path.display()
            ));
        }
    }
    if let (Some(_), Some(_), Some(directory)) = (field("cluster.id"), field("node.id"), field("directory.id")) {
        return Ok((id, directory));
    }
    let directory = field("directory.id").or_else(|| config.directory_id.clone()).unwrap_or_else(new_directory_id);
    write(&path, &id, node_id, &directory)?;
    Ok((id, directory))
}

/// The directory id of a log directory besides the data directory (`--log-dirs`), from
/// its `meta.properties`, which is written (with a new id) when missing, as Kafka's
/// `kafka-storage format` writes one into each of `log.dirs`. A directory of another
/// node or cluster is refused.
pub fn log_dir_identity(dir: &std::path::Path, cluster_id: &str, node_id: i32) -> Result<String, String> {
    let path = dir.join("meta.properties");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|l| l.strip_prefix('='))).map(|v| v.trim().to_string())
    };
    if let Some(recorded) = field("cluster.id").filter(|c| c != cluster_id) {
        return Err(format!("{} belongs to cluster {recorded}, not this node's {cluster_id}", path.display()));
    }
    if let Some(recorded) = field("node.id").filter(|n| *n != node_id.to_string()) {
        return Err(format!("{} belongs to node {recorded}, not node {node_id}", path.display()));
    }
    if let (Some(_), Some(_), Some(directory)) = (field("cluster.id"), field("node.id"), field("directory.id")) {
        return Ok(directory);
    }
    let directory = field("directory.id").unwrap_or_else(new_directory_id);
    write(&path, cluster_id, node_id, &directory)?;
    Ok(directory)
}

/// A new directory id, as Kafka's `Uuid.randomUuid`: never one starting with '-', which
/// command lines would take for an option (`remove-controller --controller-directory-id`).
fn new_directory_id() -> String {
    use base64::Engine as _;
    loop {
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// Writes `meta.properties` (version 1) whole: a temp file, then a rename.
fn write(path: &std::path::Path, cluster_id: &str, node_id: i32, directory: &str) -> Result<(), String> {
    let temp = path.with_extension("properties.tmp");
    std::fs::write(&temp, format!("version=1\ncluster.id={cluster_id}\nnode.id={node_id}\ndirectory.id={directory}\n"))
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use crate::config::{NodeConfig, StartArgs};

    // The directory id `--initial-controllers` names for this node goes into a new
    // data directory's meta.properties; a directory formatted with another is refused,
    // and one given none keeps what it holds.
    #[test]
    fn initial_controllers_name_the_directory_id() {
        let dir = tempfile::tempdir().unwrap();
        let node = |directory: &str| {
            NodeConfig::load(StartArgs {
                node_id: Some(1),
                data_dir: Some(dir.path().to_path_buf()),
                initial_controllers: Some(format!("1@127.0.0.1:19093:{directory}")),
                ..Default::default()
            })
            .unwrap()
        };
        let (cluster, directory) = super::identity(&node("pbvuBlaTTwKRxS5NLJwRFQ")).unwrap();
        assert_eq!(directory, "pbvuBlaTTwKRxS5NLJwRFQ");
        let text = std::fs::read_to_string(dir.path().join("meta.properties")).unwrap();
        assert!(text.contains("directory.id=pbvuBlaTTwKRxS5NLJwRFQ\n"), "{text}");
        let refused = super::identity(&node("Q9cK0kGqQ-WSs3JS1H9sRw")).unwrap_err();
        assert!(refused.contains("but --initial-controllers names Q9cK0kGqQ-WSs3JS1H9sRw"), "{refused}");
        let plain = NodeConfig::load(StartArgs {
            node_id: Some(1),
            data_dir: Some(dir.path().to_path_buf()),
            controller_voters: Some("1@127.0.0.1:19093".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(super::identity(&plain).unwrap(), (cluster, "pbvuBlaTTwKRxS5NLJwRFQ".to_string()));
    }
}
