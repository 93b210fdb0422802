//! Host inspection and tuning for Skein (`skein tune check | apply | revert`).
//!
//! `check` reads each tunable that matters to a thread-per-core broker on io_uring
//! (the CPU governor and boost, transparent huge pages, swappiness and dirty ratios,
//! `fs.aio-max-nr`, io_uring availability, the memlock limit, the clocksource, the
//! data disk's scheduler, merges, write cache and queue depth, its file system and
//! mount options, the NUMA nodes of the shards' cores, CPU isolation, device
//! interrupts landing on the shards' cores, packet steering (RPS/XPS), and the
//! ballast file) and says what Skein wants and why. A knob
//! the host lacks is reported with the reason, never an error, so it runs on cloud
//! VMs. `apply` sets what it can after recording the previous values in a revert
//! file under the data directory; `revert` restores them. Everything is read
//! through `Host`, relative to a root directory, so that tests run against a fake
//! `/sys` and `/proc` tree. As Redpanda's `rpk redpanda tune` and Seastar's
//! `perftune.py`, but reversible.
#![forbid(unsafe_code)]

pub mod apply;
pub mod check;
pub mod host;
pub mod profile;

pub use apply::{apply, revert, Change, REVERT_FILE};
pub use check::{check, Finding, Fix, Target};
pub use host::Host;

/// The findings as one table: tunable, current, recommended, whether `apply` can set
/// it, then why (one line each, wrapped by the terminal).
pub fn render(findings: &[Finding]) -> String {
    let rows: Vec<[String; 5]> = findings
        .iter()
        .map(|f| {
            let state = match (&f.current, f.ok) {
                (None, _) => "n/a",
                (Some(_), true) => "ok",
                (Some(_), false) => "CHANGE",
            };
            let current = match &f.current {
                Some(value) => value.clone(),
                None => "n/a".into(),
            };
            let applies = match (&f.fix, f.ok) {
                (_, true) => "-".to_string(),
                (Fix::Write { .. }, false) => "apply".into(),
                (Fix::Manual(how), false) => format!("manual: {how}"),
                (Fix::None, false) => "-".into(),
            };
            let why = match &f.reason {
                Some(reason) => format!("{} ({reason})", f.why),
                None => f.why.to_string(),
            };
            [format!("{state:6} {}", f.name), current, f.recommended.clone(), applies, why]
        })
        .collect();
    let header = ["tunable", "current", "recommended", "apply", "why"].map(String::from);
    let mut widths = [0usize; 4];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (i, cell) in row.iter().enumerate() {
            match i < 4 {
                true => out.push_str(&format!("{cell:<width$}  ", width = widths[i])),
                false => out.push_str(cell),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A fake host: two NUMA nodes, four CPUs with cpufreq, THP always, a disk under
    /// the mq-deadline scheduler holding the data directory, and an NVMe interrupt on
    /// CPU 0.
    fn fake_host(root: &Path, data_dir: &Path) {
        let write = |path: &str, text: &str| {
            let path = root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{text}\n")).unwrap();
        };
        for cpu in 0..4 {
            write(&format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"), "powersave");
        }
        write("/sys/devices/system/cpu/online", "0-3");
        write("/sys/devices/system/cpu/isolated", "");
        write("/sys/devices/system/node/node0/cpulist", "0-1");
        write("/sys/devices/system/node/node1/cpulist", "2-3");
        write("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never");
        write("/proc/sys/vm/swappiness", "60");
        write("/proc/sys/vm/dirty_background_ratio", "10");
        write("/proc/sys/vm/dirty_ratio", "20");
        write("/proc/sys/fs/aio-max-nr", "65536");
        write("/proc/sys/kernel/io_uring_disabled", "0");
        write("/sys/devices/system/clocksource/clocksource0/current_clocksource", "kvm-clock");
        write("/sys/devices/system/clocksource/clocksource0/available_clocksource", "kvm-clock tsc");
        write("/proc/self/limits", "Limit Soft Hard Units\nMax locked memory 8388608 8388608 bytes");
        write(
            "/proc/interrupts",
            "           CPU0 CPU1\n 40:  100  0  PCI-MSI  nvme0q1\n 41: 5 5 PCI-MSI virtio0-config\n 42: 1 1 PCI-MSI virtio1-req.0",
        );
        write("/proc/irq/40/smp_affinity_list", "0");
        write("/proc/irq/41/smp_affinity_list", "0-3");
        write("/proc/irq/42/smp_affinity_list", "2");
        let mounts = format!("/dev/vdb {} xfs rw,relatime 0 0", data_dir.display());
        write("/proc/mounts", &mounts);
        // The data directory's device, found through /sys/dev/block as on a host.
        let (major, minor) = host::device_of(data_dir).unwrap();
        write("/sys/block/vdb/queue/scheduler", "[mq-deadline] kyber none");
        write("/sys/block/vdb/queue/nomerges", "0");
        write("/sys/block/vdb/queue/write_cache", "write back");
        write("/sys/block/vdb/queue/nr_requests", "256");
        // A physical NIC with one receive queue on four CPUs: RPS should spread it.
        write("/sys/devices/pci0000:00/virtio2/net/eth0/queues/rx-0/rps_cpus", "0");
        write("/sys/devices/virtual/net/lo/queues/rx-0/rps_cpus", "0");
        std::fs::create_dir_all(root.join("sys/class/net")).unwrap();
        std::os::unix::fs::symlink("../../devices/pci0000:00/virtio2/net/eth0", root.join("sys/class/net/eth0"))
            .unwrap();
        std::os::unix::fs::symlink("../../devices/virtual/net/lo", root.join("sys/class/net/lo")).unwrap();
        std::fs::create_dir_all(root.join("sys/dev/block")).unwrap();
        std::os::unix::fs::symlink("../../block/vdb", root.join(format!("sys/dev/block/{major}:{minor}"))).unwrap();
    }

    fn finding<'a>(findings: &'a [Finding], name: &str) -> &'a Finding {
        findings.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no {name} in {findings:#?}"))
    }

    // On the fake tree, check reports what differs with its fix; apply sets what it
    // can and records the old values; applying twice keeps the first record; revert
    // restores the tree exactly and removes the record.
    #[test]
    fn check_apply_revert_on_a_fake_tree() {
        let root = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        fake_host(root.path(), data.path());
        let host = Host::new(root.path());
        let target = Target { data_dir: data.path().to_path_buf(), cores: vec![0, 1] };
        let findings = check(&host, &target);
        let governor = finding(&findings, "cpu0 frequency governor");
        assert_eq!((governor.current.as_deref(), governor.ok), (Some("powersave"), false));
        assert!(findings.iter().all(|f| f.name != "cpu2 frequency governor"), "only Skein's cores");
        assert_eq!(finding(&findings, "transparent huge pages").current.as_deref(), Some("always"));
        assert_eq!(finding(&findings, "vdb scheduler").current.as_deref(), Some("mq-deadline"));
        assert!(finding(&findings, "vdb queue depth").ok);
        assert!(finding(&findings, "NUMA nodes of Skein's cores").ok, "cores 0-1 are on node0");
        assert!(matches!(finding(&findings, "memlock limit (bytes)").fix, Fix::Manual(_)));
        let irq = finding(&findings, "irq 40 (nvme0q1) affinity");
        assert_eq!(irq.fix, Fix::Write { path: "/proc/irq/40/smp_affinity_list".into(), value: "2-3".into() });
        assert!(findings.iter().all(|f| !f.name.contains("virtio0-config")), "not a queue");
        assert!(finding(&findings, "irq 42 (virtio1-req.0) affinity").ok, "a disk queue already off Skein's cores");
        let rps = finding(&findings, "eth0 rx-0 RPS");
        assert_eq!(rps.fix, Fix::Write { path: "/sys/class/net/eth0/queues/rx-0/rps_cpus".into(), value: "f".into() });
        assert!(findings.iter().all(|f| !f.name.starts_with("lo ")), "virtual devices are not tuned");
        let fs = finding(&findings, &format!("file system of {}", data.path().display()));
        assert_eq!(fs.current.as_deref(), Some("xfs (atime updates)"));
        assert!(render(&findings).contains("CHANGE cpu0 frequency governor"));

        let before = snapshot(root.path());
        let (changes, errors) = apply(&host, data.path(), &findings).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let changed =
            |path: &str| changes.iter().find(|c| c.path == path).map(|c| (c.before.as_str(), c.after.as_str()));
        assert_eq!(changed("/sys/kernel/mm/transparent_hugepage/enabled"), Some(("always", "madvise")));
        assert_eq!(changed("/sys/block/vdb/queue/scheduler"), Some(("mq-deadline", "none")));
        assert_eq!(changed("/proc/sys/vm/swappiness"), Some(("60", "1")));
        assert_eq!(
            changed("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            Some(("kvm-clock", "tsc"))
        );
        assert_eq!(host.read("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").as_deref(), Some("performance"));
        assert_eq!(host.read("/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor").as_deref(), Some("powersave"));
        // A second apply over a changed tree records nothing new.
        host.write("/proc/sys/vm/swappiness", "30").unwrap();
        let again = check(&host, &target);
        apply(&host, data.path(), &again).unwrap();

        let (reverted, errors) = revert(&host, data.path()).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(reverted.iter().any(|c| c.path == "/proc/sys/vm/swappiness" && c.after == "60"));
        // A choice list is written back as its selection, which the kernel shows
        // bracketed; this fake tree keeps what was written.
        let mut after = snapshot(root.path());
        for (path, text) in after.iter_mut() {
            if let Some(original) = before.get(path) {
                if original.contains('[') && !text.contains('[') {
                    *text = original.clone();
                }
            }
        }
        assert_eq!(after, before);
        assert!(!data.path().join(REVERT_FILE).exists());
        assert!(revert(&host, data.path()).unwrap_err().contains("nothing to revert"));
    }

    // An empty root is a host without any knob: every finding says why, none fails.
    #[test]
    fn an_empty_host_is_all_not_applicable() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let target = Target { data_dir: root.path().join("data"), cores: vec![0] };
        let findings = check(&host, &target);
        assert!(findings.len() >= 10);
        assert!(findings.iter().all(|f| f.current.is_none() && f.reason.is_some()), "{findings:#?}");
        let (changes, errors) = apply(&host, &target.data_dir, &findings).unwrap();
        assert!(changes.is_empty() && errors.is_empty());
        assert!(render(&findings).lines().skip(1).all(|line| line.starts_with("n/a")));
        assert!(findings.iter().any(|f| f.name == "ballast file"));
    }

    /// Every file under `root` with its text.
    fn snapshot(root: &Path) -> std::collections::BTreeMap<String, String> {
        let mut out = std::collections::BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_symlink() {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.insert(path.display().to_string(), std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        out
    }
}
