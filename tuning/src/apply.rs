//! `skein tune apply` and `revert`. Before `apply` writes a knob it records the
//! knob's previous value in the revert file under the data directory (synced before
//! the write, so a crash between the two leaves nothing unrecorded); a knob already
//! recorded keeps its first value, so applying twice still reverts to the host as it
//! was. `revert` writes the recorded values back and removes the file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::check::{Finding, Fix};
use crate::host::Host;

/// The revert file's name, in the data directory.
pub const REVERT_FILE: &str = "tune-revert.json";

/// One knob changed, from `before` to `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub before: String,
    pub after: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} -> {}", self.path, self.before, self.after)
    }
}

/// What the revert file holds: each knob's value before the first `apply`.
type Recorded = BTreeMap<String, String>;

fn revert_path(data_dir: &Path) -> PathBuf {
    data_dir.join(REVERT_FILE)
}

fn read_recorded(data_dir: &Path) -> Result<Recorded, String> {
    let path = revert_path(data_dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{} does not parse: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Recorded::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Writes the revert file whole: a temporary file, synced, renamed over it.
fn write_recorded(data_dir: &Path, recorded: &Recorded) -> Result<(), String> {
    std::fs::create_dir_all(data_dir).map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let path = revert_path(data_dir);
    let temporary = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(recorded).expect("a map of strings serialises");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(data_dir)?.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The current value a knob's file holds, as it would be written back (a choice
/// list's selected entry).
fn writable_value(host: &Host, path: &str) -> Option<String> {
    let text = host.read(path)?;
    Some(match (text.find('['), text.find(']')) {
        (Some(open), Some(close)) if open < close => text[open + 1..close].to_string(),
        _ => text,
    })
}

/// Applies every finding `apply` can set, recording the previous values first.
/// Returns the changes made and the errors of those that failed (the others are
/// still made).
///
/// # Errors
/// The revert file cannot be read or written: nothing is changed then.
pub fn apply(host: &Host, data_dir: &Path, findings: &[Finding]) -> Result<(Vec<Change>, Vec<String>), String> {
    let mut recorded = read_recorded(data_dir)?;
    let mut planned = Vec::new();
    for finding in findings.iter().filter(|f| !f.ok) {
        let Fix::Write { path, value } = &finding.fix else { continue };
        let Some(before) = writable_value(host, path) else { continue };
        recorded.entry(path.clone()).or_insert_with(|| before.clone());
        planned.push(Change { path: path.clone(), before, after: value.clone() });
    }
    if planned.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    write_recorded(data_dir, &recorded)?;
    let (mut changes, mut errors) = (Vec::new(), Vec::new());
    for change in planned {
        match host.write(&change.path, &change.after) {
            Ok(()) => changes.push(change),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Ok((changes, errors))
}

/// Writes back every value the revert file recorded and removes it. Returns the
/// changes made and the errors of those that failed (the file is then kept, so
/// that a later `revert` can retry them).
///
/// # Errors
/// The revert file cannot be read, or there is none.
pub fn revert(host: &Host, data_dir: &Path) -> Result<(Vec<Change>, Vec<String>), String> {
    let path = revert_path(data_dir);
    if !path.exists() {
        return Err(format!("nothing to revert: {} does not exist", path.display()));
    }
    let recorded = read_recorded(data_dir)?;
    let (mut changes, mut errors, mut left) = (Vec::new(), Vec::new(), Recorded::new());
    for (knob, before) in recorded {
        let now = writable_value(host, &knob).unwrap_or_else(|| "?".into());
        match host.write(&knob, &before) {
            Ok(()) => changes.push(Change { path: knob, before: now, after: before }),
            Err(e) => {
                errors.push(e.to_string());
                left.insert(knob, before);
            }
        }
    }
    match left.is_empty() {
        true => std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?,
        false => write_recorded(data_dir, &left)?,
    }
    Ok((changes, errors))
}
