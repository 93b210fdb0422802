//! The host as files: every knob `skein tune` reads or writes is a file under `/sys`
//! or `/proc`, read relative to a root directory, so that a test can hand it a fake
//! tree (`--root`). Nothing here asks the running kernel anything else.

use std::io;
use std::path::{Path, PathBuf};

/// The host's `/sys` and `/proc`, under `root` (`/` on a real host).
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Host {
        Host { root: root.into() }
    }

    /// Where absolute `path` of the host is under the root.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The trimmed text of `path`, or `None` when it cannot be read (absent on this
    /// kernel or this machine, or not readable).
    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(path)).ok().map(|text| text.trim().to_string())
    }

    /// Writes `value` to `path`, as `echo value > path` does.
    ///
    /// # Errors
    /// The write's error, with the path named.
    pub fn write(&self, path: &str, value: &str) -> io::Result<()> {
        std::fs::write(self.path(path), format!("{value}\n"))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot write {path}: {e}")))
    }

    /// The names in directory `path` that start with `prefix`, sorted; none when the
    /// directory cannot be read.
    pub fn list(&self, path: &str, prefix: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.path(path)) else { return Vec::new() };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(prefix))
            .collect();
        names.sort_by_key(|name| natural(name));
        names
    }

    /// The target of symbolic link `path`, resolved against its directory, as a host
    /// path (under the root).
    pub fn resolve_link(&self, path: &str) -> Option<PathBuf> {
        let full = self.path(path);
        let target = std::fs::read_link(&full).ok()?;
        Some(full.parent()?.join(target))
    }
}

/// A name with its trailing number, so that `cpu10` sorts after `cpu9`.
fn natural(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem.to_string(), number.parse().unwrap_or(0))
}

/// Linux's CPU list syntax (`0-3,8,10-11`).
///
/// # Errors
/// A message naming the part that is not a number or a range.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?} in CPU list {text:?} is not a CPU or a range a-b");
        match part.split_once('-') {
            Some((low, high)) => {
                let (low, high): (usize, usize) = (low.parse().map_err(|_| bad())?, high.parse().map_err(|_| bad())?);
                if low > high || high - low > 1 << 16 {
                    return Err(bad());
                }
                cpus.extend(low..=high);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `cpus` in Linux's CPU list syntax, ranges folded.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    parts.join(",")
}

/// The block device (major, minor) of the file system holding `path`.
pub fn device_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    // glibc's gnu_dev_major and gnu_dev_minor.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    Some((major, minor))
}

/// The block device holding `path` (or its nearest existing ancestor): its name and
/// sysfs directory, the whole disk rather than a partition, found through
/// `/sys/dev/block/MAJ:MIN`.
pub fn block_device(host: &Host, path: &Path) -> Option<(String, String)> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let (major, minor) = device_of(existing)?;
    let link = host.resolve_link(&format!("/sys/dev/block/{major}:{minor}"))?;
    let canonical = std::fs::canonicalize(&link).unwrap_or(link);
    // A partition's queue is its disk's.
    let disk = match canonical.join("partition").exists() {
        true => canonical.parent()?.to_path_buf(),
        false => canonical,
    };
    let name = disk.file_name()?.to_string_lossy().to_string();
    Some((name.clone(), format!("/sys/block/{name}")))
}

/// The mount holding `path` (or its nearest existing ancestor) in `mounts`, the text
/// of `/proc/mounts`: its mount point, file system type and options.
pub fn mount_of(mounts: &str, path: &Path) -> Option<(String, String, String)> {
    let dir = std::fs::canonicalize(path.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/")))
        .unwrap_or_else(|_| path.to_path_buf());
    mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 4).then(|| (fields[1].to_string(), fields[2].to_string(), fields[3].to_string()))
        })
        .filter(|(point, _, _)| dir.starts_with(point))
        .max_by_key(|(point, _, _)| point.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    // CPU lists parse as the kernel writes them, fold back, and nonsense is refused.
    #[test]
    fn cpu_lists() {
        let check = |text: &str, cpus: &[usize], folded: &str| {
            assert_eq!(parse_cpu_list(text).unwrap(), cpus, "{text}");
            assert_eq!(format_cpu_list(cpus), folded);
        };
        check("0-3", &[0, 1, 2, 3], "0-3");
        check("0,2-3,8", &[0, 2, 3, 8], "0,2-3,8");
        check(" 5 ", &[5], "5");
        check("", &[], "");
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("0-99999999").is_err());
    }

    // Names sort by their number, not as text.
    #[test]
    fn natural_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["cpu10", "cpu2", "cpu1", "cpufreq"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        let host = Host::new(dir.path());
        assert_eq!(host.list("/", "cpu"), ["cpu1", "cpu2", "cpu10", "cpufreq"]);
    }
}
