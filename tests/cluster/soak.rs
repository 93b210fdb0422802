//! The long soak: three nodes under random faults for `SOAK_MINUTES` (120 by default),
//! with the fault loop's idempotent producer and reader, a transactional producer that
//! commits three transactions in four and aborts the fourth, and a consumer group.
//! The faults, drawn at random from `SOAK_SEED`: kill -9 of a leader or a follower,
//! SIGSTOP of a leader past its session timeout, a clean restart, a network partition
//! (with network namespaces, as root), a rolling restart of every node, and a
//! disk-full episode on node 3 (whose data directory is a 1 GiB file system of its
//! own, filled with a preallocated ballast file for 8 s, which the node must report
//! as `skein_log_dir_full`). Every minute it samples each
//! node's resident memory and open file descriptors. At the end: the fault loop's
//! checker over the idempotent topic; read_committed sees every committed transaction
//! whole, no aborted one, and an uncertain one (its commit failed at the client) whole
//! or not at all; the group consumed; and the samples, with the growth of each node
//! process over its life. Not drawn: clock steps (no per-node clock yet) and a share
//! group (the rdkafka crate has no share consumer).
//!
//! `SOAK_MINUTES=120 cargo test --test cluster soak -- --ignored --nocapture`

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::faults::{inject, Fault, Numbered};
use super::*;
use crate::common::LoopFs;

const TOPIC: &str = "soak";
const TXN_TOPIC: &str = "soak-txn";
const PARTITIONS: i32 = 3;
/// Node 3's data directory, a file system of its own for the disk-full episodes.
const SMALL_DISK: u64 = 1 << 30;

#[test]
#[ignore = "hours long: SOAK_MINUTES=120 cargo test --test cluster soak -- --ignored --nocapture"]
fn soak_under_random_faults() {
    let minutes: u64 = std::env::var("SOAK_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(120);
    let seed: u64 = std::env::var("SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("soak: {minutes} minutes, SOAK_SEED={seed}");
    let mut random = XorShift(seed | 1);
    let disk: Mutex<Option<LoopFs>> = Mutex::new(None);
    let mount = |id: i32, data: &std::path::Path| {
        if id == 3 {
            *disk.lock().unwrap() = Some(LoopFs::at(&data.parent().unwrap().join("fs.img"), data, SMALL_DISK));
        }
    };
    let mut cluster = match Cluster::start_partitionable_prepared(3, &FAST_FAILURE_DETECTION, mount) {
        Ok(cluster) => cluster,
        Err(why) => {
            eprintln!("network namespaces refused ({why}): the soak runs without partitions");
            let flags = |_| FAST_FAILURE_DETECTION.iter().map(|s| s.to_string()).collect();
            Cluster::start_prepared(3, 3, flags, mount)
        }
    };
    cluster.wait_for_brokers();
    create_replicated(cluster.node(1), TOPIC, PARTITIONS);
    create_replicated(cluster.node(1), TXN_TOPIC, PARTITIONS);
    wait_until_healed(&cluster, TOPIC, PARTITIONS, Duration::from_secs(10));
    wait_until_healed(&cluster, TXN_TOPIC, PARTITIONS, Duration::from_secs(10));
    let bootstrap: String = cluster.nodes.iter().map(Broker::bootstrap).collect::<Vec<_>>().join(",");

    let numbered = Numbered::start(&cluster, TOPIC, PARTITIONS);
    let stop = Arc::new(AtomicBool::new(false));
    let transactions = {
        let (bootstrap, stop) = (bootstrap.clone(), stop.clone());
        std::thread::spawn(move || transact(&bootstrap, &stop))
    };
    let consumed = Arc::new(AtomicUsize::new(0));
    let group = {
        let (bootstrap, stop, consumed) = (bootstrap.clone(), stop.clone(), consumed.clone());
        std::thread::spawn(move || consume_in_group(&bootstrap, &stop, &consumed))
    };

    let mut faults = vec![Fault::KillLeader, Fault::KillFollower, Fault::PauseLeader, Fault::Restart];
    if cluster.lan.is_some() {
        faults.push(Fault::Partition);
    }
    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut last_sample = None::<Instant>;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        if last_sample.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            last_sample = Some(Instant::now());
            samples.extend(sample(&cluster, started.elapsed()));
        }
        // The faults of the loop, a rolling restart, or a full disk on node 3.
        let pick = random.below(faults.len() as u64 + 2) as usize;
        let partition = random.below(PARTITIONS as u64) as i32;
        let name = match pick {
            p if p < faults.len() => {
                inject(&mut cluster, faults[p], TOPIC, partition);
                format!("{:?}", faults[p])
            }
            p if p == faults.len() => {
                for id in 1..=3 {
                    cluster.node_mut(id).stop();
                    cluster.node_mut(id).restart();
                    wait_until_healed(&cluster, TOPIC, PARTITIONS, Duration::from_secs(120));
                }
                "RollingRestart".to_string()
            }
            _ => {
                // A ballast the node never noticed would be no disk-full episode.
                assert!(fill_disk(cluster.node(3), Duration::from_secs(8)), "node 3 did not report its disk full");
                "DiskFull".to_string()
            }
        };
        *counts.entry(name).or_default() += 1;
        wait_until_healed(&cluster, TOPIC, PARTITIONS, Duration::from_secs(120));
        wait_until_healed(&cluster, TXN_TOPIC, PARTITIONS, Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(5_000 + random.below(15_000)));
    }
    samples.extend(sample(&cluster, started.elapsed()));
    println!("faults: {counts:?}");

    stop.store(true, Ordering::Relaxed);
    let outcome = transactions.join().unwrap();
    group.join().unwrap();
    println!("idempotent: {}", numbered.check(&cluster));
    check_transactions(&bootstrap, &outcome);
    let consumed = consumed.load(Ordering::Relaxed);
    assert!(consumed > 0, "the consumer group read nothing");
    println!("group: {consumed} records consumed");
    report(&samples);
    for node in &mut cluster.nodes {
        node.stop();
    }
    drop(cluster);
    drop(disk);
}

/// A small deterministic generator (xorshift64), so that `SOAK_SEED` replays a run's
/// choices.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Fills the file system holding `node`'s data directory with a preallocated ballast
/// file (all but 1 MiB of its free space), holds it for `hold`, then frees it. Returns
/// whether the node reported its disk full (`skein_log_dir_full`) meanwhile.
fn fill_disk(node: &Broker, hold: Duration) -> bool {
    let data_dir = &node.data_dir;
    use std::os::fd::AsRawFd;
    // SAFETY: statvfs writes the struct it is given; the path is NUL-terminated.
    let free = unsafe {
        let path = std::ffi::CString::new(data_dir.to_str().unwrap()).unwrap();
        let mut stat: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(path.as_ptr(), &mut stat), 0, "statvfs {}", data_dir.display());
        stat.f_bavail * stat.f_frsize
    };
    let ballast = data_dir.join("soak-ballast");
    let file = std::fs::File::create(&ballast).unwrap();
    let size = free.saturating_sub(1 << 20) as libc::off_t;
    // SAFETY: a valid descriptor; fallocate reserves blocks without writing them.
    let reserved = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) };
    assert_eq!(reserved, 0, "fallocate of {size} bytes: {}", std::io::Error::last_os_error());
    // Appends go on into space their segments reserved before (up to 32 MiB each), so
    // on a slow machine the node may need longer than `hold` to run into the full
    // disk: held until it does, or a minute.
    let (until, give_up, mut noticed) = (Instant::now() + hold, Instant::now() + Duration::from_secs(60), false);
    while Instant::now() < until || (!noticed && Instant::now() < give_up) {
        std::thread::sleep(Duration::from_millis(250));
        noticed |= metric(node, "skein_log_dir_full") == 1;
    }
    drop(file);
    std::fs::remove_file(&ballast).unwrap();
    noticed
}

/// What the transactional producer did: the transactions whose commit it saw
/// succeed, those it aborted (or never committed), and those whose commit failed at
/// the client (committed or not, never in part).
#[derive(Debug, Default)]
struct Outcome {
    committed: Vec<u32>,
    aborted: Vec<u32>,
    uncertain: Vec<u32>,
}

/// One transaction every 200 ms, a record `t<n>-<p>` on each partition; three in four
/// committed, the fourth aborted. A producer that fails fatally (fenced, or its
/// coordinator lost the transaction) is replaced by a new one of the same
/// transactional id, whose initialisation aborts what the old one left open.
fn transact(bootstrap: &str, stop: &AtomicBool) -> Outcome {
    let mut outcome = Outcome::default();
    let mut producer: Option<BaseProducer> = None;
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let current = match producer.take() {
            Some(p) => p,
            None => {
                let created: BaseProducer = ClientConfig::new()
                    .set("bootstrap.servers", bootstrap)
                    .set("transactional.id", "soak-txn")
                    .set("transaction.timeout.ms", "60000")
                    .set("message.timeout.ms", "60000")
                    .create()
                    .unwrap();
                if created.init_transactions(Duration::from_secs(60)).is_err() {
                    continue;
                }
                created
            }
        };
        n += 1;
        let sent = current.begin_transaction().and_then(|()| {
            for p in 0..PARTITIONS {
                let value = format!("t{n}-{p}");
                current.send(BaseRecord::<(), str>::to(TXN_TOPIC).partition(p).payload(&value)).map_err(|(e, _)| e)?;
            }
            current.flush(Duration::from_secs(60))
        });
        let keep = match sent {
            Err(_) => {
                // Never committed: aborted now, or by the next producer's init.
                outcome.aborted.push(n);
                current.abort_transaction(Duration::from_secs(60)).is_ok()
            }
            Ok(()) if n.is_multiple_of(4) => {
                outcome.aborted.push(n);
                current.abort_transaction(Duration::from_secs(60)).is_ok()
            }
            Ok(()) => match current.commit_transaction(Duration::from_secs(60)) {
                Ok(()) => {
                    outcome.committed.push(n);
                    true
                }
                Err(_) => {
                    outcome.uncertain.push(n);
                    false
                }
            },
        };
        if keep {
            producer = Some(current);
        }
    }
    println!(
        "transactions: {} committed, {} aborted, {} uncertain",
        outcome.committed.len(),
        outcome.aborted.len(),
        outcome.uncertain.len()
    );
    outcome
}

/// Reads the transactional topic read_committed to its end: every committed
/// transaction is there whole and once, no aborted one is, an uncertain one is whole
/// or absent.
fn check_transactions(bootstrap: &str, outcome: &Outcome) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "soak-txn-checker")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut assignment = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset(TXN_TOPIC, p, rdkafka::Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut seen: BTreeMap<u32, Vec<i32>> = BTreeMap::new();
    let mut ended = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while ended.len() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "read_committed stalled at {} partitions", ended.len());
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
                let (txn, part) = value[1..].split_once('-').expect("t<n>-<p>");
                assert_eq!(part.parse::<i32>().unwrap(), m.partition(), "{value} on partition {}", m.partition());
                seen.entry(txn.parse().unwrap()).or_default().push(m.partition());
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            _ => {}
        }
    }
    let whole = |n: &u32| seen.get(n).is_some_and(|parts| parts.len() == PARTITIONS as usize);
    let missing: Vec<&u32> = outcome.committed.iter().filter(|n| !whole(n)).collect();
    assert!(missing.is_empty(), "committed transactions not read whole: {missing:?}");
    let visible: Vec<&u32> = outcome.aborted.iter().filter(|n| seen.contains_key(n)).collect();
    assert!(visible.is_empty(), "aborted transactions read: {visible:?}");
    let partial: Vec<(&u32, &Vec<i32>)> = seen.iter().filter(|(n, _)| !whole(n)).collect();
    assert!(partial.is_empty(), "transactions read in part or twice: {partial:?}");
    let unknown: Vec<&u32> =
        seen.keys().filter(|n| !outcome.committed.contains(n) && !outcome.uncertain.contains(n)).collect();
    assert!(unknown.is_empty(), "transactions read that were never committed: {unknown:?}");
    let landed = outcome.uncertain.iter().filter(|n| seen.contains_key(n)).count();
    println!(
        "read_committed: {} transactions whole; {landed} of {} uncertain landed",
        seen.len(),
        outcome.uncertain.len()
    );
}

/// A consumer of group `soak-group` reading the idempotent topic with automatic
/// commits until `stop`.
fn consume_in_group(bootstrap: &str, stop: &AtomicBool, consumed: &AtomicUsize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "soak-group")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .create()
        .unwrap();
    consumer.subscribe(&[TOPIC]).unwrap();
    while !stop.load(Ordering::Relaxed) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            consumed.fetch_add(1, Ordering::Relaxed);
        }
    }
    // As `read_offsets`: not destroyed (librdkafka 2.12's destroy can deadlock after
    // a fault loop).
    std::mem::forget(consumer);
}

/// A node process's resident memory and open descriptors at a moment of the run.
struct Sample {
    at: Duration,
    node: usize,
    pid: u32,
    rss_mib: u64,
    fds: usize,
}

fn sample(cluster: &Cluster, at: Duration) -> Vec<Sample> {
    let mut samples = Vec::new();
    for (i, node) in cluster.nodes.iter().enumerate() {
        let Some(pid) = node.child.as_ref().map(std::process::Child::id) else { continue };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        samples.push(Sample { at, node: i + 1, pid, rss_mib: rss_kib / 1024, fds });
    }
    samples
}

/// Prints every sample, then each process's growth from its fifth minute (warmed up)
/// to its last.
fn report(samples: &[Sample]) {
    println!("minute node pid rss_mib fds");
    for s in samples {
        println!("{:>6} {:>4} {:>7} {:>7} {:>4}", s.at.as_secs() / 60, s.node, s.pid, s.rss_mib, s.fds);
    }
    let mut lives: BTreeMap<(usize, u32), Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        lives.entry((s.node, s.pid)).or_default().push(s);
    }
    for ((node, pid), life) in lives.iter().filter(|(_, life)| life.len() > 5) {
        let (first, last) = (life[4], life[life.len() - 1]);
        println!(
            "node {node} pid {pid}: {} minutes, rss {} -> {} MiB, fds {} -> {}",
            (last.at - first.at).as_secs() / 60,
            first.rss_mib,
            last.rss_mib,
            first.fds,
            last.fds
        );
    }
}
