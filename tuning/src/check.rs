//! What `skein tune check` looks at: each tunable's current value on this host, the
//! value Skein wants, why, and whether `apply` can set it. A knob the machine lacks
//! (no cpufreq on a VM, no NVMe queue) is a finding with no current value and the
//! reason, never an error: the check runs on any Linux host and changes nothing.

use std::path::PathBuf;

use crate::host::{block_device, format_cpu_list, mount_of, parse_cpu_list, Host};

/// What the checks are about: the node's data directory and the CPUs its shards run on.
#[derive(Debug, Clone)]
pub struct Target {
    pub data_dir: PathBuf,
    /// The CPUs Skein's shards are pinned to.
    pub cores: Vec<usize>,
}

/// How a finding can be set right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// `apply` writes `value` to `path` (a host path under `/sys` or `/proc`).
    Write { path: String, value: String },
    /// `apply` cannot: what an operator does instead.
    Manual(String),
    /// Nothing to do.
    None,
}

/// One tunable as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is, e.g. `cpu0 frequency governor`.
    pub name: String,
    /// The current value; `None` when this host lacks the knob (`reason` says why).
    pub current: Option<String>,
    pub recommended: String,
    /// Why it matters to Skein.
    pub why: &'static str,
    /// The current value is already what Skein wants.
    pub ok: bool,
    pub fix: Fix,
    /// Why there is no current value, or a note on it.
    pub reason: Option<String>,
}

impl Finding {
    fn absent(name: impl Into<String>, recommended: &str, why: &'static str, reason: impl Into<String>) -> Finding {
        Finding {
            name: name.into(),
            current: None,
            recommended: recommended.into(),
            why,
            ok: true,
            fix: Fix::None,
            reason: Some(reason.into()),
        }
    }

    /// A knob in file `path` whose value should be `recommended`: `ok` when `good`
    /// says so, else written by `apply`.
    fn file(
        host: &Host,
        name: impl Into<String>,
        path: &str,
        recommended: &str,
        why: &'static str,
        good: impl Fn(&str) -> bool,
    ) -> Finding {
        let name = name.into();
        match host.read(path) {
            None => Finding::absent(name, recommended, why, format!("{path} is not present on this host")),
            Some(current) => {
                let ok = good(&current);
                let fix = match ok {
                    true => Fix::None,
                    false => Fix::Write { path: path.to_string(), value: recommended.to_string() },
                };
                Finding { name, current: Some(current), recommended: recommended.into(), why, ok, fix, reason: None }
            }
        }
    }

    /// Shows `bound` as the recommendation (the value `apply` writes stays): for
    /// knobs any value within a bound suits.
    fn within(mut self, bound: &str) -> Finding {
        self.recommended = bound.to_string();
        self
    }
}

/// The selected value of a sysfs choice list (`always [madvise] never`), or the text
/// itself when it has no brackets.
fn selected(text: &str) -> &str {
    match (text.find('['), text.find(']')) {
        (Some(open), Some(close)) if open < close => &text[open + 1..close],
        _ => text,
    }
}

/// Every check, in the order `check` prints them.
pub fn check(host: &Host, target: &Target) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.extend(cpu(host, target));
    findings.extend(memory(host));
    findings.extend(kernel(host));
    findings.extend(disk(host, target));
    findings.extend(placement(host, target));
    findings
}

fn cpu(host: &Host, target: &Target) -> Vec<Finding> {
    const GOVERNOR: &str = "a shard polls its ring and sockets: a governor that lowers the clock between bursts adds wake-up latency to every request";
    let mut out = Vec::new();
    let mut any = false;
    for &cpu in &target.cores {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor");
        if host.read(&path).is_none() {
            continue;
        }
        any = true;
        out.push(Finding::file(host, format!("cpu{cpu} frequency governor"), &path, "performance", GOVERNOR, |v| {
            v == "performance"
        }));
    }
    if !any {
        out.push(Finding::absent(
            "CPU frequency governor",
            "performance",
            GOVERNOR,
            "no cpufreq for Skein's cores (a VM, or the hypervisor sets the clock)",
        ));
    }
    out.push(Finding::file(
        host,
        "CPU boost",
        "/sys/devices/system/cpu/cpufreq/boost",
        "1",
        "turbo frequencies shorten request service time on the shards' cores",
        |v| v == "1",
    ));
    out
}

fn memory(host: &Host) -> Vec<Finding> {
    let thp = "/sys/kernel/mm/transparent_hugepage/enabled";
    let thp_finding = match host.read(thp) {
        None => Finding::absent("transparent huge pages", "madvise", THP, format!("{thp} is not present on this host")),
        Some(text) => {
            let current = selected(&text).to_string();
            let ok = current != "always";
            let fix = match ok {
                true => Fix::None,
                false => Fix::Write { path: thp.into(), value: "madvise".into() },
            };
            Finding {
                name: "transparent huge pages".into(),
                current: Some(current),
                recommended: "madvise".into(),
                why: THP,
                ok,
                fix,
                reason: None,
            }
        }
    };
    vec![
        thp_finding,
        Finding::file(
            host,
            "vm.swappiness",
            "/proc/sys/vm/swappiness",
            "1",
            "a swapped-out batch cache or request buffer stalls its shard on a page fault",
            |v| v.parse::<u32>().is_ok_and(|n| n <= 1),
        ),
        Finding::file(
            host,
            "vm.dirty_background_ratio",
            "/proc/sys/vm/dirty_background_ratio",
            "5",
            "Skein's logs bypass the page cache (O_DIRECT); other writers' dirty pages flushed late compete with its writes in bursts",
            |v| v.parse::<u32>().is_ok_and(|n| n <= 10),
        )
        .within("<= 10 (apply: 5)"),
        Finding::file(
            host,
            "vm.dirty_ratio",
            "/proc/sys/vm/dirty_ratio",
            "10",
            "a process blocked in the kernel's writeback throttling while holding the disk queue delays the shards' writes",
            |v| v.parse::<u32>().is_ok_and(|n| n <= 20),
        )
        .within("<= 20 (apply: 10)"),
        memlock(host),
    ]
}

const THP: &str = "with `always`, the kernel zeroes 2 MiB pages for fresh buffers on the request path (15-18% of a shard's samples under TLS in RESULTS.md); `madvise` leaves it to those who ask";

/// The memory a process may lock, from the limits of the process reading it.
fn memlock(host: &Host) -> Finding {
    const WHY: &str =
        "io_uring's rings and registered buffers are locked memory: a low limit refuses rings or caps their depth";
    let Some(limits) = host.read("/proc/self/limits") else {
        return Finding::absent("memlock limit", "unlimited", WHY, "/proc/self/limits is not present");
    };
    let Some(line) = limits.lines().find(|l| l.starts_with("Max locked memory")) else {
        return Finding::absent("memlock limit", "unlimited", WHY, "no \"Max locked memory\" in /proc/self/limits");
    };
    let soft = line.split_whitespace().nth(3).unwrap_or("?").to_string();
    let ok = soft == "unlimited" || soft.parse::<u64>().is_ok_and(|bytes| bytes >= 64 << 20);
    Finding {
        name: "memlock limit (bytes)".into(),
        current: Some(soft),
        recommended: "unlimited".into(),
        why: WHY,
        ok,
        fix: match ok {
            true => Fix::None,
            false => Fix::Manual("LimitMEMLOCK=infinity in the service unit, or `ulimit -l unlimited`".into()),
        },
        reason: None,
    }
}

fn kernel(host: &Host) -> Vec<Finding> {
    let mut clocksource = Finding::file(
        host,
        "clocksource",
        "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "tsc",
        "every latency histogram and timer reads the clock: tsc is read in user space, others trap into the kernel or the hypervisor",
        |v| v == "tsc",
    );
    let available = host.read("/sys/devices/system/clocksource/clocksource0/available_clocksource");
    if !clocksource.ok && !available.as_deref().is_some_and(|a| a.split_whitespace().any(|c| c == "tsc")) {
        clocksource.fix = Fix::Manual("this host offers no tsc clocksource".into());
    }
    vec![
        Finding::file(
            host,
            "fs.aio-max-nr",
            "/proc/sys/fs/aio-max-nr",
            "1048576",
            "the storage engine and glommio keep many I/O contexts per shard; a low host-wide cap refuses them at start",
            |v| v.parse::<u64>().is_ok_and(|n| n >= 1_048_576),
        )
        .within(">= 1048576"),
        Finding::file(
            host,
            "kernel.io_uring_disabled",
            "/proc/sys/kernel/io_uring_disabled",
            "0",
            "Skein runs on io_uring: 1 or 2 refuses its rings (it will not start)",
            |v| v == "0",
        ),
        clocksource,
    ]
}

fn disk(host: &Host, target: &Target) -> Vec<Finding> {
    const SCHEDULER: &str = "Skein orders and batches its own writes (group commit, one write in flight per block): a scheduler only adds queueing latency on fast devices";
    const NOMERGES: &str = "Skein's writes are already whole chunks; merge attempts cost CPU on every request";
    let Some((name, queue)) = block_device(host, &target.data_dir) else {
        return vec![Finding::absent(
            "data directory's disk",
            "-",
            "the disk checks need the data directory's block device",
            format!("cannot find the block device of {} under /sys/dev/block", target.data_dir.display()),
        )];
    };
    let scheduler_path = format!("{queue}/queue/scheduler");
    let mut scheduler = match host.read(&scheduler_path) {
        None => {
            Finding::absent(format!("{name} scheduler"), "none", SCHEDULER, format!("{scheduler_path} is not present"))
        }
        Some(text) => {
            let current = selected(&text).to_string();
            let ok = current == "none";
            let fix = match (ok, text.split_whitespace().any(|s| selected(s) == "none")) {
                (true, _) => Fix::None,
                (false, true) => Fix::Write { path: scheduler_path, value: "none".into() },
                (false, false) => Fix::Manual("this device offers no `none` scheduler".into()),
            };
            Finding {
                name: format!("{name} scheduler"),
                current: Some(current),
                recommended: "none".into(),
                why: SCHEDULER,
                ok,
                fix,
                reason: None,
            }
        }
    };
    if name.starts_with("zram") || name.starts_with("loop") {
        scheduler.reason = Some(format!("{name} is not a real disk: benchmarks on it measure memory"));
    }
    let write_cache = format!("{queue}/queue/write_cache");
    let write_cache = match host.read(&write_cache) {
        None => Finding::absent(
            format!("{name} write cache"),
            "write back",
            WRITE_CACHE,
            format!("{write_cache} is not present"),
        ),
        Some(mode) => Finding {
            name: format!("{name} write cache"),
            ok: true,
            recommended: "as the device reports".into(),
            current: Some(mode.clone()),
            why: WRITE_CACHE,
            fix: Fix::None,
            reason: (mode == "write back")
                .then(|| "fdatasync flushes the cache: `flush=always` topics pay for it".into()),
        },
    };
    let depth = format!("{queue}/queue/nr_requests");
    let depth = match host.read(&depth) {
        None => Finding::absent(format!("{name} queue depth"), ">= 64", DEPTH, format!("{depth} is not present")),
        Some(value) => {
            let ok = value.parse::<u32>().is_ok_and(|n| n >= 64);
            Finding {
                name: format!("{name} queue depth"),
                ok,
                recommended: ">= 64".into(),
                current: Some(value),
                why: DEPTH,
                fix: match ok {
                    true => Fix::None,
                    false => Fix::Write { path: format!("{queue}/queue/nr_requests"), value: "64".into() },
                },
                reason: None,
            }
        }
    };
    vec![
        scheduler,
        Finding::file(host, format!("{name} nomerges"), &format!("{queue}/queue/nomerges"), "2", NOMERGES, |v| {
            v == "2"
        }),
        write_cache,
        depth,
        filesystem(host, target),
    ]
}

const WRITE_CACHE: &str =
    "a volatile write cache makes fdatasync a cache flush; report only, a device's cache mode is not Skein's to change";
const DEPTH: &str =
    "each shard keeps several appends and read-ahead windows in flight; a shallow queue serialises them";

/// The file system and mount options of the data directory (`/proc/mounts`).
fn filesystem(host: &Host, target: &Target) -> Finding {
    const WHY: &str = "xfs and ext4 keep O_DIRECT appends into fallocated space off the journal; atime updates turn every read into a write";
    let Some(mounts) = host.read("/proc/mounts") else {
        return Finding::absent(
            "data directory's file system",
            "xfs or ext4, noatime",
            WHY,
            "/proc/mounts is not present",
        );
    };
    let Some((point, kind, options)) = mount_of(&mounts, &target.data_dir) else {
        return Finding::absent("data directory's file system", "xfs or ext4, noatime", WHY, "no mount holds it");
    };
    let noatime = options.split(',').any(|o| o == "noatime");
    let ok = matches!(kind.as_str(), "xfs" | "ext4") && noatime;
    Finding {
        name: format!("file system of {point}"),
        current: Some(format!("{kind} ({})", if noatime { "noatime" } else { "atime updates" })),
        recommended: "xfs or ext4, noatime".into(),
        why: WHY,
        ok,
        fix: match ok {
            true => Fix::None,
            false => Fix::Manual(format!("mount {point} with noatime on xfs or ext4 (fstab)")),
        },
        reason: None,
    }
}

fn placement(host: &Host, target: &Target) -> Vec<Finding> {
    let cores = format_cpu_list(&target.cores);
    let mut out = Vec::new();
    // NUMA: the shards' cores on one node keep their memory and the device's
    // interrupts local.
    let nodes: Vec<(String, Vec<usize>)> = host
        .list("/sys/devices/system/node", "node")
        .into_iter()
        .filter_map(|node| {
            let cpus = host.read(&format!("/sys/devices/system/node/{node}/cpulist"))?;
            Some((node, parse_cpu_list(&cpus).ok()?))
        })
        .collect();
    const NUMA: &str =
        "a shard on one node reading memory or a device on another pays the interconnect on every access";
    match nodes.len() {
        0 => out.push(Finding::absent("NUMA nodes of Skein's cores", "one node", NUMA, "no NUMA topology under /sys")),
        _ => {
            let used: Vec<&str> = nodes
                .iter()
                .filter(|(_, cpus)| cpus.iter().any(|c| target.cores.contains(c)))
                .map(|(node, _)| node.as_str())
                .collect();
            out.push(Finding {
                name: "NUMA nodes of Skein's cores".into(),
                current: Some(format!("{} ({cores})", used.join(","))),
                recommended: "one node".into(),
                why: NUMA,
                ok: used.len() <= 1,
                fix: match used.len() <= 1 {
                    true => Fix::None,
                    false => Fix::Manual("start with --cores (or --cpuset) on one node's CPUs".into()),
                },
                reason: None,
            });
        }
    }
    // CPU isolation: isolated cores that Skein does not use are wasted, and Skein's
    // cores shared with the scheduler's other work jitter.
    const ISOLATION: &str = "cores isolated from the scheduler (isolcpus, nohz_full) run only Skein's shards: no other task preempts a reactor";
    let isolated = host.read("/sys/devices/system/cpu/isolated").and_then(|t| parse_cpu_list(&t).ok());
    let nohz = host.read("/sys/devices/system/cpu/nohz_full").and_then(|t| parse_cpu_list(&t).ok());
    match isolated {
        None => out.push(Finding::absent(
            "isolated cores",
            &cores,
            ISOLATION,
            "/sys/devices/system/cpu/isolated is not present",
        )),
        Some(isolated) => {
            let nohz = nohz.unwrap_or_default();
            let ok = target.cores.iter().all(|c| isolated.contains(c));
            out.push(Finding {
                name: "isolated cores (isolcpus)".into(),
                current: Some(format!(
                    "{} (nohz_full {})",
                    none_if_empty(&format_cpu_list(&isolated)),
                    none_if_empty(&format_cpu_list(&nohz))
                )),
                recommended: cores.clone(),
                why: ISOLATION,
                ok,
                fix: match ok {
                    true => Fix::None,
                    false => Fix::Manual(format!(
                        "boot with isolcpus={cores} nohz_full={cores}, or run Skein on the isolated cores"
                    )),
                },
                reason: None,
            });
        }
    }
    out.extend(irqs(host, target));
    out.extend(steering(host));
    out.push(Finding::absent(
        "ballast file",
        "none",
        "a ballast file is space to free when the disk fills",
        "Skein keeps none: a full disk is refused before data is buffered (the engine's DiskFull), and nothing acknowledged is lost",
    ));
    out
}

/// A CPU set as the kernel's hexadecimal mask (`ff,ffffffff`: 32-bit groups, most
/// significant first).
pub(crate) fn format_cpu_mask(cpus: &[usize]) -> String {
    let groups = cpus.iter().max().map_or(1, |max| max / 32 + 1);
    let mut words = vec![0u32; groups];
    for &cpu in cpus {
        words[cpu / 32] |= 1 << (cpu % 32);
    }
    let text: Vec<String> = words
        .iter()
        .rev()
        .enumerate()
        .map(|(i, w)| match i {
            0 => format!("{w:x}"),
            _ => format!("{w:08x}"),
        })
        .collect();
    text.join(",")
}

/// The CPUs of a kernel hexadecimal mask; `None` when it does not parse.
pub(crate) fn parse_cpu_mask(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for (group, word) in text.trim().rsplit(',').enumerate() {
        let word = u32::from_str_radix(word, 16).ok()?;
        cpus.extend((0..32).filter(|bit| word & (1 << bit) != 0).map(|bit| group * 32 + bit));
    }
    Some(cpus)
}

/// Receive and transmit packet steering (RPS/XPS) of the physical network devices.
/// A NIC with fewer receive queues than CPUs hands all its packets to the cores of
/// its few queues' interrupts; RPS spreads that work over every CPU.
fn steering(host: &Host) -> Vec<Finding> {
    const WHY: &str = "a NIC with fewer queues than CPUs processes every packet on its queues' interrupt cores; RPS spreads receive work over the CPUs";
    let online = host.read("/sys/devices/system/cpu/online").and_then(|t| parse_cpu_list(&t).ok()).unwrap_or_default();
    let mut out = Vec::new();
    for device in host.list("/sys/class/net", "") {
        let physical = host
            .resolve_link(&format!("/sys/class/net/{device}"))
            .is_some_and(|target| !target.to_string_lossy().contains("/virtual/"));
        if !physical {
            continue;
        }
        let queues = format!("/sys/class/net/{device}/queues");
        let rx = host.list(&queues, "rx-");
        let spread = rx.len() < online.len();
        let wanted = match spread {
            true => format_cpu_mask(&online),
            false => "0".to_string(),
        };
        for queue in rx {
            let path = format!("{queues}/{queue}/rps_cpus");
            let Some(current) = host.read(&path) else { continue };
            let ok = match spread {
                true => parse_cpu_mask(&current).is_some_and(|cpus| online.iter().all(|c| cpus.contains(c))),
                false => true,
            };
            out.push(Finding {
                name: format!("{device} {queue} RPS"),
                current: Some(current),
                recommended: match spread {
                    true => wanted.clone(),
                    false => "as set (a queue per CPU)".into(),
                },
                why: WHY,
                ok,
                fix: match ok {
                    true => Fix::None,
                    false => Fix::Write { path, value: wanted.clone() },
                },
                reason: None,
            });
        }
        // XPS: transmit queues picked by the sending CPU; report what is set.
        for queue in host.list(&queues, "tx-") {
            let path = format!("{queues}/{queue}/xps_cpus");
            if let Some(current) = host.read(&path) {
                out.push(Finding {
                    name: format!("{device} {queue} XPS"),
                    current: Some(current),
                    recommended: "as set".into(),
                    why: "XPS picks a transmit queue by the sending CPU; the driver's default keeps a shard on its own queue",
                    ok: true,
                    fix: Fix::None,
                    reason: None,
                });
            }
        }
    }
    if out.is_empty() {
        out.push(Finding::absent("packet steering (RPS/XPS)", "-", WHY, "no physical network device with queues"));
    }
    out
}

fn none_if_empty(text: &str) -> &str {
    if text.is_empty() {
        "none"
    } else {
        text
    }
}

/// Interrupts of NVMe and network queues that land on Skein's cores: each one
/// preempts a reactor. Recommended: the cores Skein does not use.
fn irqs(host: &Host, target: &Target) -> Vec<Finding> {
    const WHY: &str =
        "a device interrupt handled on a shard's core preempts its reactor; steer them to the cores Skein leaves free";
    let Some(table) = host.read("/proc/interrupts") else {
        return vec![Finding::absent("device interrupts", "off Skein's cores", WHY, "/proc/interrupts is not present")];
    };
    let online = host.read("/sys/devices/system/cpu/online").and_then(|t| parse_cpu_list(&t).ok()).unwrap_or_default();
    let free: Vec<usize> = online.iter().copied().filter(|c| !target.cores.contains(c)).collect();
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let Some((irq, rest)) = line.split_once(':') else { continue };
        let irq = irq.trim();
        if irq.parse::<u32>().is_err() {
            continue;
        }
        let device = rest.split_whitespace().last().unwrap_or("");
        // NVMe queues, virtio-blk (`virtioN-req.Q`) and virtio-net (`-input.Q`,
        // `-output.Q`) queues, and common NIC drivers' queues.
        let nic = ["eth", "ens", "enp", "mlx", "ixgbe", "i40e", "ena"].iter().any(|prefix| device.starts_with(prefix));
        let virtio_queue =
            device.starts_with("virtio") && ["-req.", "-input.", "-output."].iter().any(|queue| device.contains(queue));
        if !(device.starts_with("nvme") || virtio_queue || nic) {
            continue;
        }
        let path = format!("/proc/irq/{irq}/smp_affinity_list");
        let Some(affinity) = host.read(&path) else { continue };
        let Ok(cpus) = parse_cpu_list(&affinity) else { continue };
        let ok = free.is_empty() || !cpus.iter().any(|c| target.cores.contains(c));
        let fix = match (ok, free.is_empty()) {
            (true, _) => Fix::None,
            (false, true) => Fix::Manual("every CPU runs a shard: leave one free for interrupts".into()),
            (false, false) => Fix::Write { path: path.clone(), value: format_cpu_list(&free) },
        };
        out.push(Finding {
            name: format!("irq {irq} ({device}) affinity"),
            current: Some(affinity),
            recommended: match free.is_empty() {
                true => "a CPU without a shard".into(),
                false => format_cpu_list(&free),
            },
            why: WHY,
            ok,
            fix,
            reason: None,
        });
    }
    if out.is_empty() {
        out.push(Finding::absent(
            "device interrupts",
            "off Skein's cores",
            WHY,
            "no NVMe or network queue interrupts listed",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // CPU masks read and written as the kernel's, 32-bit groups most significant
    // first.
    #[test]
    fn cpu_masks() {
        assert_eq!(format_cpu_mask(&[0, 1]), "3");
        assert_eq!(format_cpu_mask(&[]), "0");
        assert_eq!(format_cpu_mask(&[0, 33]), "2,00000001");
        assert_eq!(parse_cpu_mask("2,00000001"), Some(vec![0, 33]));
        assert_eq!(parse_cpu_mask("0"), Some(vec![]));
        assert_eq!(parse_cpu_mask("zz"), None);
    }

    // A choice list's selection is the bracketed word.
    #[test]
    fn selections() {
        assert_eq!(selected("always [madvise] never"), "madvise");
        assert_eq!(selected("[none] mq-deadline"), "none");
        assert_eq!(selected("performance"), "performance");
    }
}
