//! One node per data directory and per port, as Kafka refuses a second broker on
//! either: the data directory is locked with `flock` on its `.lock` file (Kafka's
//! name), and a Kafka or admin address that another process already listens on is
//! refused before the shards bind it. The shards share their port through
//! SO_REUSEPORT, which would otherwise let two unrelated nodes split one port's
//! clients between them.
//!
//! Both run once at start, on the main thread, before any executor exists.

use std::io::{Read, Seek, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

/// Holds the data directory's lock for as long as it lives.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Locks `data_dir` for this process and writes its pid into the lock file.
///
/// # Errors
/// A message naming the process that holds the lock, or the I/O error.
pub fn lock_data_dir(data_dir: &Path) -> Result<DataDirLock, String> {
    let path = data_dir.join(".lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if let Err(e) = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim();
        let who = if holder.is_empty() { "another process".to_string() } else { format!("process {holder}") };
        return Err(format!(
            "data directory {} is in use by {who} (its {} is locked: {e}); one node per data directory",
            data_dir.display(),
            path.display()
        ));
    }
    file.set_len(0).and_then(|()| file.rewind()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    writeln!(file, "{}", std::process::id()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(DataDirLock { _file: file })
}

/// Refuses `address` when a socket of any process already listens on it (or on the
/// wildcard address of its port), read from `/proc/net/tcp` and `/proc/net/tcp6`.
///
/// # Errors
/// A message naming the address.
pub fn refuse_taken(address: SocketAddr, what: &str) -> Result<(), String> {
    if address.port() == 0 {
        return Ok(());
    }
    let taken = || {
        ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|table| std::fs::read_to_string(table).ok())
            .any(|table| listeners(&table).any(|l| l.port() == address.port() && overlaps(l.ip(), address.ip())))
    };
    // A node that was just killed still shows its listener while the kernel tears
    // down its io_uring (pending accepts hold the socket): give that a moment before
    // deciding the address belongs to someone else.
    let deadline = std::time::Instant::now() + TEARDOWN_WAIT;
    while taken() {
        if std::time::Instant::now() >= deadline {
            return Err(format!("cannot listen on {address} ({what}): another process already listens on it"));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// How long a listener seen on the address may take to go away before the address
/// counts as taken (the io_uring teardown of a process killed a moment ago).
const TEARDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether a listener on `a` receives connections meant for `b`, or the reverse.
fn overlaps(a: IpAddr, b: IpAddr) -> bool {
    a.is_unspecified() || b.is_unspecified() || a == b || a.to_canonical() == b.to_canonical()
}

/// The listening addresses in a `/proc/net/tcp` or `tcp6` table.
fn listeners(table: &str) -> impl Iterator<Item = SocketAddr> + '_ {
    const LISTEN: &str = "0A";
    table.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        if state != LISTEN {
            return None;
        }
        let (ip, port) = local.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let ip = parse_ip(ip)?;
        Some(SocketAddr::new(ip, port))
    })
}

/// An address as the kernel prints it: 32-bit words in host (little-endian) order.
fn parse_ip(hex: &str) -> Option<IpAddr> {
    let words: Vec<u32> =
        (0..hex.len() / 8).map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16)).collect::<Result<_, _>>().ok()?;
    match words.as_slice() {
        [v4] => Some(IpAddr::from(v4.swap_bytes().to_be_bytes())),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.swap_bytes().to_be_bytes());
            }
            Some(IpAddr::from(bytes))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Listening sockets are read from the kernel's tables as it prints them.
    #[test]
    fn reads_proc_net_tcp() {
        let v4 = "  sl  local_address rem_address   st\n   0: 0100007F:2384 00000000:0000 0A 000\n   1: 0100007F:2385 0100007F:9C40 01 000\n";
        let found: Vec<SocketAddr> = listeners(v4).collect();
        assert_eq!(found, vec!["127.0.0.1:9092".parse::<std::net::SocketAddr>().unwrap()]);
        let v6 = "  sl  local_address rem_address st\n   0: 00000000000000000000000000000000:2384 00000000000000000000000000000000:0000 0A 0\n";
        let found: Vec<SocketAddr> = listeners(v6).collect();
        assert_eq!(found, vec!["[::]:9092".parse::<std::net::SocketAddr>().unwrap()]);
        assert!(overlaps("0.0.0.0".parse().unwrap(), "127.0.0.1".parse().unwrap()));
        assert!(!overlaps("127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()));
    }

    // A real listener of this process is seen; a free port is not.
    #[test]
    fn sees_a_real_listener() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = held.local_addr().unwrap();
        assert!(refuse_taken(address, "test").is_err());
        drop(held);
        assert!(refuse_taken(address, "test").is_ok());
    }

    // A second lock on the same directory is refused and names the holder's pid.
    #[test]
    fn data_dir_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let _held = lock_data_dir(dir.path()).unwrap();
        // flock locks belong to the open file description: a second open conflicts.
        let error = lock_data_dir(dir.path()).unwrap_err();
        assert!(error.contains(&format!("process {}", std::process::id())), "{error}");
    }
}
