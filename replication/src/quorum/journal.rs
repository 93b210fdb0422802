//! The quorum's durable state in the data directory: `quorum.state` (the whole
//! `Durable`: snapshot with its image, entries, hard state) and `quorum.log`, the
//! frames appended since.
//!
//! `quorum.log` is a file of fixed size, written with zeros when it is made, so that a
//! frame overwrites blocks that already exist: no extent to convert, no size to
//! change, and its fdatasync commits no filesystem journal (a rename and a directory
//! sync per change stalled every O_DIRECT append on ext4). Each frame starts on a
//! 4 KiB boundary, so that a torn write never touches an earlier one: magic,
//! generation, sequence, length, CRC-32C, then the hard state and the entries.
//!
//! Opening (main thread, blocking, before the shards start) loads `quorum.state`,
//! replays the frames of its generation in sequence up to the first that does not
//! check, then writes the result as `quorum.state` of the next generation: frames of
//! older generations are never replayed. When the log is full, or the quorum compacts
//! its entries into a snapshot, the driver folds the whole state the same way through
//! io_uring. Afterwards only the controller writes, through io_uring.

use std::path::{Path, PathBuf};

use raft::prelude::{Entry, HardState, Snapshot};
use skein_engine::io::dma::DmaStorage;
use skein_engine::io::{IoBuf, Storage, StorageFile};

use super::Durable;

/// Size of `quorum.log`; a full log is folded into `quorum.state`.
pub const LOG_BYTES: u64 = 4 << 20;
/// Frames start at multiples of this.
pub const BLOCK: u64 = 4096;
const FRAME_MAGIC: u32 = 0x534b_514c; // "SKQL"
const STATE_MAGIC: u32 = 0x534b_5153; // "SKQS"
const FRAME_HEADER: usize = 4 + 8 + 8 + 4 + 4;
const STATE_HEADER: usize = 4 + 8 + 4;

/// Where the quorum's state lives and where its log continues.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    state_path: PathBuf,
    log_path: PathBuf,
    generation: u64,
    /// Sequence number and position of the next frame.
    sequence: u64,
    position: u64,
}

impl Journal {
    /// Loads the state under `dir` and replays its log; a directory without state
    /// starts from `bootstrap()`. Then starts a new generation. Blocking: for the main
    /// thread, before the shards start.
    ///
    /// # Errors
    /// A message when a file exists but cannot be read or parsed, or cannot be written.
    pub fn open(dir: &Path, bootstrap: impl FnOnce() -> Durable) -> Result<(Journal, Durable), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?.flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let state_path = dir.join("quorum.state");
        let log_path = dir.join("quorum.log");
        let read = |path: &Path| match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        };
        let (state, log) = (read(&state_path)?, read(&log_path)?);
        let (generation, durable, replayed) =
            load(state.as_deref(), log.as_deref(), bootstrap).map_err(|e| format!("{}: {e}", dir.display()))?;
        if replayed > 0 {
            tracing::info!(target: "skein::quorum", frames = replayed, commit = durable.hard_state.commit, "quorum log replayed");
        }
        let mut journal =
            Journal { dir: dir.to_path_buf(), state_path, log_path, generation, sequence: 0, position: 0 };
        journal.prepare_log()?;
        journal.fold_blocking(&durable)?;
        Ok((journal, durable))
    }

    /// Makes the log file, whole and zero-filled, unless it already is.
    fn prepare_log(&self) -> Result<(), String> {
        let fail = |e: std::io::Error| format!("cannot prepare {}: {e}", self.log_path.display());
        if std::fs::metadata(&self.log_path).is_ok_and(|m| m.len() == LOG_BYTES) {
            return Ok(());
        }
        let temp = self.log_path.with_extension("log.tmp");
        std::fs::write(&temp, vec![0u8; LOG_BYTES as usize]).map_err(fail)?;
        std::fs::File::open(&temp).and_then(|f| f.sync_all()).map_err(fail)?;
        std::fs::rename(&temp, &self.log_path).map_err(fail)?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(fail)
    }

    /// Writes `durable` as the state of a new generation, blocking; the log starts
    /// over.
    fn fold_blocking(&mut self, durable: &Durable) -> Result<(), String> {
        use std::io::Write;
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", self.state_path.display());
        let temp = self.state_path.with_extension("start.tmp");
        let mut file = std::fs::File::create(&temp).map_err(fail)?;
        file.write_all(&encode_state(self.generation + 1, durable)).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temp, &self.state_path).map_err(fail)?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(fail)?;
        self.start_generation();
        Ok(())
    }

    fn start_generation(&mut self) {
        self.generation += 1;
        self.sequence = 0;
        self.position = 0;
    }

    /// Makes one `Work`'s state durable: a frame with `entries` and `hard_state`, or,
    /// when the log is full or a snapshot was installed, `whole` (the state after the
    /// work) as a new generation. Through io_uring; safe on an executor thread.
    ///
    /// # Errors
    /// The first failing step; then nothing may be acknowledged.
    pub async fn persist(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        whole: &Durable,
    ) -> std::io::Result<()> {
        if snapshot.is_some() {
            return self.fold(whole).await;
        }
        if entries.is_empty() && hard_state.is_none() {
            return Ok(());
        }
        let body = encode_frame_body(entries, hard_state);
        let padded = ((FRAME_HEADER + body.len()) as u64).div_ceil(BLOCK) * BLOCK;
        if self.position + padded > LOG_BYTES {
            return self.fold(whole).await;
        }
        let frame = encode_frame(self.generation, self.sequence, &body);
        let file = DmaStorage.open_file(&self.log_path, false).await?;
        let mut buf = file.alloc_buf(padded as usize);
        buf.as_bytes_mut()[..frame.len()].copy_from_slice(&frame);
        buf.as_bytes_mut()[frame.len()..].fill(0);
        let written = file.write_at(buf, self.position).await?;
        if (written as u64) < padded {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "short write of a quorum frame"));
        }
        file.fdatasync().await?;
        self.position += padded;
        self.sequence += 1;
        Ok(())
    }

    /// Writes `whole` as the state of a new generation (a full log, a compaction, an
    /// installed snapshot); the log starts over. Through io_uring.
    ///
    /// # Errors
    /// The failing step; the previous state and log then still hold.
    pub async fn fold(&mut self, whole: &Durable) -> std::io::Result<()> {
        let state = encode_state(self.generation + 1, whole);
        skein_engine::io::write_whole_atomic(&DmaStorage, &self.state_path, &state).await?;
        self.start_generation();
        Ok(())
    }
}

fn put_message(out: &mut Vec<u8>, message: &dyn protobuf::Message) {
    let bytes = message.write_to_bytes().expect("raft messages always encode");
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(&bytes);
}

/// Reads length-prefixed protobuf messages from a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*head))
    }

    fn message<M: protobuf::Message>(&mut self) -> Option<M> {
        let length = self.u32()? as usize;
        let bytes = self.0.get(..length)?;
        self.0 = &self.0[length..];
        M::parse_from_bytes(bytes).ok()
    }

    fn entries(&mut self) -> Option<Vec<Entry>> {
        let count = self.u32()? as usize;
        // Each entry takes at least its 4-byte length: a count past the bytes left is
        // damage, refused before allocating for it.
        if count > self.0.len() / 4 {
            return None;
        }
        (0..count).map(|_| self.message::<Entry>()).collect()
    }
}

/// What a journal's files hold: the state of `state` (or `bootstrap()` when there is
/// none) with the frames of `log` replayed onto it. Returns the generation, the state,
/// and how many frames were replayed. Whether raft can start from it is
/// `Quorum::new`'s check (`Durable::check`).
///
/// # Errors
/// A damaged state file.
pub fn load(
    state: Option<&[u8]>,
    log: Option<&[u8]>,
    bootstrap: impl FnOnce() -> Durable,
) -> Result<(u64, Durable, usize), String> {
    let (generation, mut durable) = match state {
        Some(bytes) => decode_state(bytes).ok_or("quorum.state is damaged")?,
        None => (0, bootstrap()),
    };
    let replayed = log.map_or(0, |log| replay(log, generation, &mut durable));
    Ok((generation, durable, replayed))
}

/// One frame of the log: its header (generation, sequence, length, CRC-32C) and `body`,
/// unpadded.
pub fn encode_frame(generation: u64, sequence: u64, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEADER + body.len());
    frame.extend_from_slice(&FRAME_MAGIC.to_be_bytes());
    frame.extend_from_slice(&generation.to_be_bytes());
    frame.extend_from_slice(&sequence.to_be_bytes());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[4..]), body);
    frame.extend_from_slice(&crc.to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// A frame's body: the hard state, if any, then the entries.
pub fn encode_frame_body(entries: &[Entry], hard_state: Option<&HardState>) -> Vec<u8> {
    let mut body = Vec::new();
    match hard_state {
        Some(hard_state) => {
            body.push(1);
            put_message(&mut body, hard_state);
        }
        None => body.push(0),
    }
    body.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for entry in entries {
        put_message(&mut body, entry);
    }
    body
}

fn encode_state(generation: u64, durable: &Durable) -> Vec<u8> {
    let mut body = Vec::new();
    put_message(&mut body, &durable.snapshot);
    put_message(&mut body, &durable.hard_state);
    body.extend_from_slice(&(durable.entries.len() as u32).to_be_bytes());
    for entry in &durable.entries {
        put_message(&mut body, entry);
    }
    state_file(generation, &body)
}

/// A state file of `generation` holding `body` (the snapshot, hard state and entries),
/// behind its header and CRC-32C.
pub fn state_file(generation: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(STATE_HEADER + body.len());
    out.extend_from_slice(&STATE_MAGIC.to_be_bytes());
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c_append(crc32c::crc32c(&generation.to_be_bytes()), body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The generation and state a state file holds; `None` when damaged.
fn decode_state(bytes: &[u8]) -> Option<(u64, Durable)> {
    let magic = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    let generation = u64::from_be_bytes(bytes.get(4..12)?.try_into().ok()?);
    let crc = u32::from_be_bytes(bytes.get(12..16)?.try_into().ok()?);
    let body = &bytes[STATE_HEADER..];
    if magic != STATE_MAGIC || crc32c::crc32c_append(crc32c::crc32c(&generation.to_be_bytes()), body) != crc {
        return None;
    }
    let mut reader = Reader(body);
    let snapshot = reader.message::<Snapshot>()?;
    let hard_state = reader.message::<HardState>()?;
    let entries = reader.entries()?;
    Some((generation, Durable { snapshot, entries, hard_state }))
}

/// Applies the frames of `generation`, in sequence, to `durable`; returns how many.
/// Stops at the first frame that is absent, damaged, of another generation or out of
/// sequence (a torn last write, or an older generation's leftovers).
fn replay(log: &[u8], generation: u64, durable: &mut Durable) -> usize {
    let mut position = 0usize;
    let mut applied = 0u64;
    while position + FRAME_HEADER <= log.len() {
        let field = |at: usize, len: usize| &log[position + at..position + at + len];
        let magic = u32::from_be_bytes(field(0, 4).try_into().expect("4 bytes"));
        let frame_generation = u64::from_be_bytes(field(4, 8).try_into().expect("8 bytes"));
        let sequence = u64::from_be_bytes(field(12, 8).try_into().expect("8 bytes"));
        let length = u32::from_be_bytes(field(20, 4).try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(field(24, 4).try_into().expect("4 bytes"));
        if magic != FRAME_MAGIC || frame_generation != generation || sequence != applied {
            break;
        }
        let Some(body) = log.get(position + FRAME_HEADER..position + FRAME_HEADER + length) else { break };
        if crc32c::crc32c_append(crc32c::crc32c(field(4, 20)), body) != crc {
            break;
        }
        let mut reader = Reader(body);
        let hard_state = match reader.0.split_first() {
            Some((1, rest)) => {
                reader.0 = rest;
                let Some(hard_state) = reader.message::<HardState>() else { break };
                Some(hard_state)
            }
            Some((0, rest)) => {
                reader.0 = rest;
                None
            }
            _ => break,
        };
        let Some(entries) = reader.entries() else { break };
        durable.append(&entries);
        if let Some(hard_state) = hard_state {
            durable.hard_state = hard_state;
        }
        applied += 1;
        position += ((FRAME_HEADER + length) as u64).div_ceil(BLOCK) as usize * BLOCK as usize;
    }
    applied as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &str) -> Entry {
        Entry { index, term, data: data.as_bytes().to_vec().into(), ..Default::default() }
    }

    fn hard_state(term: u64, vote: u64, commit: u64) -> HardState {
        HardState { term, vote, commit, ..Default::default() }
    }

    type Frame = (Vec<Entry>, Option<HardState>);

    /// Persists each frame in turn on a fresh executor, as the controller does.
    fn persist_all(journal: Journal, durable: Durable, frames: Vec<Frame>) -> (Journal, Durable) {
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let (mut journal, mut whole) = (journal, durable);
                for (entries, hs) in frames {
                    whole.append(&entries);
                    if let Some(hs) = &hs {
                        whole.hard_state = hs.clone();
                    }
                    journal.persist(&entries, hs.as_ref(), None, &whole).await.unwrap();
                }
                (journal, whole)
            })
            .unwrap()
            .join()
            .unwrap()
    }

    fn open(dir: &Path) -> (Journal, Durable) {
        Journal::open(dir, || Durable::bootstrap(&[1, 2, 3], b"image".to_vec())).unwrap()
    }

    // Frames persisted are what a restart recovers (a later frame replacing an
    // uncommitted tail); a torn frame is not applied; the restart starts a generation
    // whose log does not replay the old frames.
    #[test]
    fn frames_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, durable) = open(dir.path());
        assert_eq!(Durable::bootstrap(&[1, 2, 3], b"image".to_vec()), durable);
        let frames = vec![
            (vec![entry(1, 1, "a"), entry(2, 1, "b")], Some(hard_state(1, 1, 1))),
            (vec![entry(2, 2, "B"), entry(3, 2, "c")], Some(hard_state(2, 2, 3))),
            (vec![], Some(hard_state(2, 2, 3))),
        ];
        let (journal, whole) = persist_all(journal, durable, frames);
        // A fourth frame, torn: its body is zeros, so its CRC fails.
        let log_path = dir.path().join("quorum.log");
        let mut log = std::fs::read(&log_path).unwrap();
        let at = journal.position as usize;
        log[at..at + 4].copy_from_slice(&FRAME_MAGIC.to_be_bytes());
        log[at + 4..at + 12].copy_from_slice(&journal.generation.to_be_bytes());
        log[at + 12..at + 20].copy_from_slice(&journal.sequence.to_be_bytes());
        log[at + 20..at + 24].copy_from_slice(&100u32.to_be_bytes());
        std::fs::write(&log_path, &log).unwrap();
        std::fs::write(dir.path().join("quorum.state.start.tmp"), b"torn").unwrap();
        let (reopened, loaded) = open(dir.path());
        assert_eq!(loaded, whole);
        let data: Vec<_> = loaded.entries.iter().map(|e| (e.index, e.term, e.data.to_vec())).collect();
        assert_eq!(data, [(1, 1, b"a".to_vec()), (2, 2, b"B".to_vec()), (3, 2, b"c".to_vec())]);
        assert_eq!((reopened.generation, reopened.position), (journal.generation + 1, 0));
        assert!(!dir.path().join("quorum.state.start.tmp").exists());
        let (_, again) = open(dir.path());
        assert_eq!(again, whole, "the old generation's frames are not replayed twice");
    }

    // A full log folds into a new state and starts over; nothing is lost. A damaged
    // state file is refused with its name, never replaced by a fresh quorum.
    // The fuzzer's first finding in the journal (fuzz/seeds/quorum_journal/
    // regression-voter-twice): a state naming voter 45 twice made raft panic when the
    // controller started; raft is not started from it.
    #[test]
    fn a_voter_named_twice_is_refused() {
        let conf = [0x08, 45, 0x08, 98, 0x08, 45];
        let metadata = [&[0x0a, conf.len() as u8][..], &conf].concat();
        let snapshot = [&[0x12, metadata.len() as u8][..], &metadata].concat();
        let body =
            [&(snapshot.len() as u32).to_be_bytes()[..], &snapshot, &0u32.to_be_bytes(), &0u32.to_be_bytes()].concat();
        let (_, durable, _) =
            load(Some(&state_file(0, &body)), None, || unreachable!("the state file is there")).unwrap();
        let refused =
            crate::quorum::Quorum::new(&crate::quorum::QuorumConfig::new(45, vec![45, 98]), durable).unwrap_err();
        assert!(refused.contains("repeat an id"), "{refused}");
    }

    #[test]
    fn a_full_log_folds() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, durable) = open(dir.path());
        let generation = journal.generation;
        let frames = (1..=LOG_BYTES / BLOCK + 3).map(|i| (vec![entry(i, 1, "x")], Some(hard_state(1, 1, i)))).collect();
        let (journal, whole) = persist_all(journal, durable, frames);
        assert_eq!(journal.generation, generation + 1, "folded once");
        let (_, loaded) = open(dir.path());
        assert_eq!(loaded, whole);
        let state = dir.path().join("quorum.state");
        let mut bytes = std::fs::read(&state).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&state, bytes).unwrap();
        let error = Journal::open(dir.path(), || unreachable!()).unwrap_err();
        assert!(error.contains("quorum.state is damaged"), "{error}");
    }
}
