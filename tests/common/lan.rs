//! A network of namespaces for partition faults: each node in its own network
//! namespace, joined by veth pairs to a bridge in the test's namespace, which holds
//! the test's own address on the same subnet, so clients reach every node. A
//! partition is a pair of blackhole routes (each side drops what it sends to the
//! other); clients keep reaching every node. Needs root and iproute2; `Lan::create`
//! answers why not when the machine refuses. Everything is removed on drop.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Lan {
    /// The test process and its count of lans: namespaces are named after them, so
    /// that those of a test killed before it could clean up are found and removed.
    pid: u32,
    n: u32,
    id: String,
    prefix: String,
    nodes: usize,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())),
    }
}

impl Lan {
    /// A subnet of its own with `nodes` namespaces (nodes 1 to `nodes`).
    ///
    /// # Errors
    /// Why the machine refuses (not root, no iproute2, no veth or bridge).
    pub fn create(nodes: usize) -> Result<Lan, String> {
        sweep();
        let (pid, n) = (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let seed = seed(pid, n);
        let prefix = format!("10.{}.{}", 100 + (seed >> 8) % 150, seed % 250);
        let lan = Lan { pid, n, id: format!("{seed:06x}"), prefix, nodes };
        // On an error, dropping `lan` removes what was made.
        lan.setup()?;
        Ok(lan)
    }

    fn setup(&self) -> Result<(), String> {
        let bridge = self.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}.254/24", self.prefix), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for node in 1..=self.nodes {
            let (ns, veth) = (self.netns(node), format!("skv{}n{node}", self.id));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", self.host(node)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    fn bridge(&self) -> String {
        format!("skb{}", self.id)
    }

    /// Node `node`'s namespace.
    pub fn netns(&self, node: usize) -> String {
        format!("skein-{}-{}-{node}", self.pid, self.n)
    }

    /// Node `node`'s address.
    pub fn host(&self, node: usize) -> String {
        format!("{}.{node}", self.prefix)
    }

    /// Cuts `node` off from each of `others` (both ways); clients still reach it.
    pub fn partition(&self, node: usize, others: &[usize]) {
        for &other in others {
            ip(&["-n", &self.netns(node), "route", "add", "blackhole", &format!("{}/32", self.host(other))]).unwrap();
            ip(&["-n", &self.netns(other), "route", "add", "blackhole", &format!("{}/32", self.host(node))]).unwrap();
        }
    }

    /// Undoes `partition`.
    pub fn heal(&self, node: usize, others: &[usize]) {
        for &other in others {
            ip(&["-n", &self.netns(node), "route", "del", "blackhole", &format!("{}/32", self.host(other))]).unwrap();
            ip(&["-n", &self.netns(other), "route", "del", "blackhole", &format!("{}/32", self.host(node))]).unwrap();
        }
    }

    fn remove(&self) {
        for node in 1..=self.nodes {
            let _ = ip(&["netns", "del", &self.netns(node)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

fn seed(pid: u32, n: u32) -> u32 {
    (pid << 4 | (n & 15)) & 0xff_ffff
}

/// Removes the namespaces and bridges of test processes that are gone.
fn sweep() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let mut parts = name.strip_prefix("skein-").unwrap_or_default().split('-');
        let (Some(Ok(pid)), Some(Ok(n))) = (parts.next().map(str::parse::<u32>), parts.next().map(str::parse::<u32>))
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = ip(&["netns", "del", &name]);
        let _ = ip(&["link", "del", &format!("skb{:06x}", seed(pid, n))]);
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        self.remove();
    }
}
