//! A node whose disk fills, in a three-node cluster: it refuses writes at once, its
//! leaderships move to in-sync replicas and it leaves their ISRs (as Kafka does for an
//! offline log directory), and once space is freed it catches up and rejoins them,
//! without a restart. A node with two log directories, one on a drive that fails,
//! loses only the replicas on that drive.

use std::cell::RefCell;

use common::LoopFs;

use super::*;

/// Records of 16 KiB per batch, under the default `max.message.bytes`.
const RECORDS: i32 = 60;

/// One batch of `RECORDS` records of 16 KiB (or one small record) to `topic`-`partition`
/// at `node`, acks=all: the error code and base offset.
fn produce_to(node: &Broker, topic: &str, partition: i32, large: bool) -> (i16, i64) {
    let (count, bytes) = if large { (RECORDS, 16 << 10) } else { (1, 100) };
    let batch = skein_engine::batch::testing::batch_with(count, bytes, 0, |_| None);
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![produce_request::PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))]),
    ]);
    let response: ProduceResponse = RawClient::connect(&node.bootstrap()).call(&request, 9);
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// The partition of `topic` (of `partitions`) that `leader` leads, as `node` says.
fn led_by(node: &Broker, topic: &str, partitions: i32, leader: i32) -> i32 {
    (0..partitions)
        .find(|&p| leader_of(node, topic, p) == leader)
        .unwrap_or_else(|| panic!("{leader} leads no {topic}"))
}

#[test]
fn a_node_whose_disk_fills_hands_its_leaderships_over() {
    // Node 3's data directory is a 128 MiB file system of its own.
    let mounted: RefCell<Option<LoopFs>> = RefCell::new(None);
    let mut cluster = Cluster::start_prepared(
        3,
        3,
        |_| FAST_FAILURE_DETECTION.iter().map(|s| s.to_string()).collect(),
        |id, data| {
            if id == 3 {
                let home = data.parent().unwrap();
                *mounted.borrow_mut() = Some(LoopFs::at(&home.join("fs.img"), data, 128 << 20));
            }
        },
    );
    cluster.wait_for_brokers();
    // Leaders spread over the brokers: one partition of each topic on node 3.
    create_with(cluster.node(1), "ballast", 3, 1).unwrap();
    create_with(cluster.node(1), "shared", 3, 3).unwrap();
    let shared = led_by(cluster.node(1), "shared", 3, 3);
    wait_for_isr(cluster.node(1), "shared", shared, &[1, 2, 3], Duration::from_secs(30));
    let ballast = led_by(cluster.node(1), "ballast", 3, 3);
    for _ in 0..30 {
        assert_eq!(produce_to(cluster.node(3), "ballast", ballast, true).0, 0);
    }
    // Node 3 leads a partition of `shared` until its disk fills: then it refuses at
    // once (KAFKA_STORAGE_ERROR, or NOT_LEADER_OR_FOLLOWER once it handed over).
    let mut refused = None;
    for _ in 0..200 {
        let sent = Instant::now();
        match produce_to(cluster.node(3), "shared", shared, true).0 {
            0 => continue,
            code => {
                refused = Some((code, sent.elapsed()));
                break;
            }
        }
    }
    let (code, took) = refused.expect("node 3's disk never filled");
    assert!(code == 56 || code == 6, "refused with {code}");
    assert!(took < Duration::from_secs(5), "the refusal took {took:?}");
    // Its heartbeats say so: the controller moves the leadership to an in-sync
    // replica, and node 3 leaves the ISR.
    wait_for_isr(cluster.node(1), "shared", shared, &[1, 2], Duration::from_secs(20));
    let leader = leader_of(cluster.node(1), "shared", shared);
    assert!(leader == 1 || leader == 2, "led by {leader}");
    assert_eq!(produce_to(cluster.node(leader), "shared", shared, false).0, 0, "the new leader takes writes");
    assert_eq!(metric(cluster.node(3), "skein_log_dir_full"), 1);

    // Space freed on node 3: it comes back, catches up and rejoins the ISR.
    let delete = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(StrBytes::from_static_str("ballast"))])
        .with_timeout_ms(10_000);
    let response: DeleteTopicsResponse = RawClient::connect(&cluster.node(1).bootstrap()).call(&delete, 4);
    assert_eq!(response.responses[0].error_code, 0);
    wait_for_isr(cluster.node(1), "shared", shared, &[1, 2, 3], Duration::from_secs(60));
    assert_eq!(metric(cluster.node(3), "skein_log_dir_full"), 0);
    let leader = leader_of(cluster.node(1), "shared", shared);
    assert_eq!(produce_to(cluster.node(leader), "shared", shared, false).0, 0);
    for node in &mut cluster.nodes {
        node.kill();
    }
    drop(mounted);
}

// Node 3 has two log directories (JBOD), one on a drive that fails (its file system
// shut down: every I/O EIO). Only the replicas on that drive go: node 3 leaves their
// ISRs and leaderships, and they take writes through the other replicas, while its
// replicas on the healthy drive stay in sync and node 3 stays in the cluster.
#[test]
fn a_failed_drive_takes_only_its_replicas_out() {
    let drives = tempfile::tempdir().unwrap();
    let drive = LoopFs::new(drives.path(), 256 << 20);
    let (failing, healthy) = (drive.mountpoint.join("logs"), drives.path().join("healthy"));
    let log_dirs = format!("{},{}", failing.display(), healthy.display());
    let mut cluster = Cluster::start_sharded(
        3,
        3,
        "2",
        |id| {
            let mut flags: Vec<String> = FAST_FAILURE_DETECTION.iter().map(|s| s.to_string()).collect();
            if id == 3 {
                flags.extend(["--log-dirs".to_string(), log_dirs.clone()]);
            }
            flags
        },
        |_, _| {},
    );
    cluster.wait_for_brokers();
    create_with(cluster.node(1), "jbod", 4, 3).unwrap();
    for p in 0..4 {
        wait_for_isr(cluster.node(1), "jbod", p, &[1, 2, 3], Duration::from_secs(30));
    }
    let in_dir =
        |dir: &std::path::Path| -> Vec<i32> { (0..4).filter(|p| dir.join(format!("jbod-{p}")).is_dir()).collect() };
    let (lost, kept) = (in_dir(&failing), in_dir(&healthy));
    assert!(!lost.is_empty() && !kept.is_empty(), "{lost:?} {kept:?}");
    // Every replica open and in sync before the drive fails (acks=all).
    for p in 0..4 {
        let leader = leader_of(cluster.node(1), "jbod", p);
        let deadline = Instant::now() + Duration::from_secs(30);
        while produce_to(cluster.node(leader), "jbod", p, false).0 != 0 {
            assert!(Instant::now() < deadline, "jbod-{p} takes no writes");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    drive.shut_down();
    // Writes reach node 3's replicas (as leader or follower) and fail there.
    let deadline = Instant::now() + Duration::from_secs(60);
    for &p in &lost {
        loop {
            let leader = leader_of(cluster.node(1), "jbod", p);
            let isr = isr(cluster.node(1), "jbod", p);
            if leader != 3 && !isr.contains(&3) && produce_to(cluster.node(leader), "jbod", p, false).0 == 0 {
                break;
            }
            if leader > 0 {
                let _ = produce_to(cluster.node(leader), "jbod", p, false);
            }
            assert!(Instant::now() < deadline, "jbod-{p}: leader {leader}, ISR {isr:?}\n{}", cluster.node(3).log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    for &p in &kept {
        assert!(isr(cluster.node(1), "jbod", p).contains(&3), "jbod-{p} kept its replica on node 3");
        let leader = leader_of(cluster.node(1), "jbod", p);
        assert_eq!(produce_to(cluster.node(leader), "jbod", p, false).0, 0);
        wait_for_isr(cluster.node(1), "jbod", p, &[1, 2, 3], Duration::from_secs(20));
    }
    assert!(describe(cluster.node(1)).brokers.iter().any(|b| b.broker_id == 3), "node 3 stays registered");
    assert!(cluster.node(3).log().contains("log directory failed"));
    for node in &mut cluster.nodes {
        node.kill();
    }
    drop(drive);
}
