//! A leader's `acks=all` appends on a real log: an answer only once the ISR holds the
//! batch, a retried batch (already in the log) answered only once it is committed,
//! and NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR that committed it shrank below
//! `min.insync.replicas` meanwhile.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use skein_engine::io::dma::DmaStorage;
use skein_engine::log::{Log, LogContext};
use skein_engine::{Batch, LeaderEpoch, LogConfig, Offset, TopicPartition};
use skein_replication::producer::ProducerStates;
use skein_replication::{AcksAll, AppendError, Partition, Refusal};

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("glommio executor (io_uring must be available)")
        .run(f)
}

/// Leader 1 of replicas [1, 2, 3] with ISR [1, 2], in epoch 3.
async fn leader(dir: &std::path::Path) -> Partition<DmaStorage> {
    let context = LogContext::new(DmaStorage, dir, 1 << 20);
    let partition = TopicPartition::new("t", 0);
    let log: Rc<Log<DmaStorage>> =
        Log::open(context, dir.join("t-0"), partition, 0, LogConfig::default()).await.expect("open");
    let replica = Partition::sole_leader(log, [0; 16], 1, ProducerStates::default());
    replica.assign(1, LeaderEpoch(3), 5, vec![1, 2, 3], vec![1, 2], 0);
    replica
}

/// acks=all with `min_insync`, waiting up to 30 s.
fn acks_all(min_insync: usize) -> Option<AcksAll> {
    Some(AcksAll { min_insync, timeout: Duration::from_secs(30) })
}

/// An idempotent producer's batch of `count` records at `sequence`.
fn batch(sequence: i32, count: i32) -> Batch {
    let mut bytes = skein_engine::batch::testing::batch(count, 8).to_vec();
    skein_engine::batch::testing::set_producer(&mut bytes, 7, 0, sequence);
    Batch::validate(Bytes::from(bytes), usize::MAX).unwrap()
}

/// Runs `append` as its own task: its handle, and a flag set once it answered.
fn spawn<T: 'static>(
    append: impl std::future::Future<Output = T> + 'static,
) -> (glommio::task::JoinHandle<T>, Rc<std::cell::Cell<bool>>) {
    let done = Rc::new(std::cell::Cell::new(false));
    let flag = done.clone();
    let task = glommio::spawn_local(async move {
        let answer = append.await;
        flag.set(true);
        answer
    })
    .detach();
    (task, done)
}

/// Whether the task behind `done` is still waiting after a moment.
async fn waits(done: &std::cell::Cell<bool>) -> bool {
    glommio::timer::sleep(Duration::from_millis(50)).await;
    !done.get()
}

#[test]
fn a_retried_batch_is_answered_once_committed() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let replica = Rc::new(leader(dir.path()).await);
        // acks=1: in the log, not yet committed (follower 2 has not fetched it).
        let first = replica.append_as_leader(batch(0, 3), None).await.unwrap();
        assert_eq!(first.base_offset, Offset(0));
        assert_eq!(replica.high_watermark(), Offset(0));
        // Its retry with acks=all waits for the ISR, then answers the original offset.
        let (retry, done) = spawn({
            let replica = replica.clone();
            async move { replica.append_as_leader(batch(0, 3), acks_all(2)).await }
        });
        assert!(waits(&done).await, "a retry was answered before its batch was committed");
        replica.follower_fetched(2, Offset(3), 3, 10).unwrap();
        let appended = retry.await.unwrap().unwrap();
        assert_eq!((appended.base_offset, appended.duplicate), (Offset(0), true));
    });
}

#[test]
fn a_batch_committed_by_too_few_replicas_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let replica = Rc::new(leader(dir.path()).await);
        let (append, done) = spawn({
            let replica = replica.clone();
            async move { replica.append_as_leader(batch(0, 2), acks_all(2)).await }
        });
        assert!(waits(&done).await, "answered before the ISR held it");
        // The ISR shrinks to the leader alone: the high watermark passes the batch,
        // but one copy is below min.insync.replicas=2.
        replica.assign(1, LeaderEpoch(3), 6, vec![1, 2, 3], vec![1], 20);
        match append.await.unwrap() {
            Err(AppendError::Refused(refusal)) => assert_eq!(refusal, Refusal::NotEnoughReplicasAfterAppend),
            other => panic!("{other:?}"),
        }
    });
}

// A replica reopened with a checkpointed high watermark starts from it, never past its
// log end (records the checkpoint counted may have gone with a power loss), and
// without a checkpoint from its log start.
#[test]
fn a_reopened_replica_starts_from_its_checkpointed_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let replica = leader(dir.path()).await;
        replica.append_as_leader(batch(0, 10), None).await.unwrap();
        replica.log().flush().await.unwrap();
        replica.log().close().await.unwrap();
        drop(replica);
        for (recovered, expected) in [(Some(Offset(7)), Offset(7)), (Some(Offset(25)), Offset(10)), (None, Offset(0))] {
            let context = LogContext::new(DmaStorage, dir.path(), 1 << 20);
            let log: Rc<Log<DmaStorage>> =
                Log::open(context, dir.path().join("t-0"), TopicPartition::new("t", 0), 0, LogConfig::default())
                    .await
                    .expect("reopen");
            assert_eq!(log.log_end_offset(), Offset(10));
            let replica = Partition::sole_leader(log, [0; 16], 2, ProducerStates::default());
            if let Some(offset) = recovered {
                replica.recover_high_watermark(offset);
            }
            replica.assign(1, LeaderEpoch(4), 6, vec![1, 2, 3], vec![1, 2, 3], 0);
            assert_eq!(replica.high_watermark(), expected, "checkpoint {recovered:?}");
            replica.log().close().await.unwrap();
        }
    });
}

// An acks=all append that is not committed within the producer's timeout is answered
// REQUEST_TIMED_OUT (Kafka's delayed produce expiring), and stays in the log.
#[test]
fn an_uncommitted_append_times_out() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let replica = leader(dir.path()).await;
        let quick = Some(AcksAll { min_insync: 2, timeout: Duration::from_millis(50) });
        match replica.append_as_leader(batch(0, 4), quick).await {
            Err(AppendError::Refused(refusal)) => assert_eq!(refusal, Refusal::RequestTimedOut),
            other => panic!("{other:?}"),
        }
        assert_eq!(replica.log().log_end_offset(), Offset(4));
        assert_eq!(replica.high_watermark(), Offset(0));
    });
}

// A consumer's long poll at the high watermark waits while the leader's writes are not
// yet on the ISR (each write only has it look again), is woken when a follower's fetch
// moves the high watermark past it, and a wait dropped unanswered leaves nothing behind
// for the next one to trip on.
#[test]
fn a_consumer_wait_ends_when_the_high_watermark_passes_it() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let replica = Rc::new(leader(dir.path()).await);
        // A wait dropped before anything arrived (the fetch's time ran out).
        let dropped = futures_lite::future::or(
            async {
                replica.wait_for_high_watermark(Offset(0)).await;
                true
            },
            async {
                glommio::timer::sleep(Duration::from_millis(20)).await;
                false
            },
        )
        .await;
        assert!(!dropped, "a wait ended with nothing written");
        let (wait, done) = spawn({
            let replica = replica.clone();
            async move {
                while replica.high_watermark() <= Offset(0) {
                    replica.wait_for_high_watermark(Offset(0)).await;
                }
            }
        });
        replica.append_as_leader(batch(0, 3), None).await.unwrap();
        assert!(waits(&done).await, "answered before the ISR held the records");
        replica.follower_fetched(2, Offset(3), 3, 10).unwrap();
        glommio::timer::timeout(Duration::from_secs(5), async {
            wait.await;
            Ok(())
        })
        .await
        .expect("the wait ended once the high watermark passed it");
        assert_eq!(replica.high_watermark(), Offset(3));
    });
}

// A replica that stops leading while its append is still being written answers that
// append NOT_LEADER_OR_FOLLOWER at once, with acks=all not REQUEST_TIMED_OUT once the
// producer's timeout passes (the step down failed the waiters before this one waited),
// and with acks=1 not success (the new leader's log may cut the batch).
#[test]
fn an_append_overtaken_by_a_step_down_is_refused_at_once() {
    for acks in [acks_all(1), None] {
        let dir = tempfile::tempdir().unwrap();
        run(async {
            let replica = Rc::new(leader(dir.path()).await);
            let (append, done) = spawn({
                let replica = replica.clone();
                async move { replica.append_as_leader(batch(0, 2), acks).await }
            });
            // The append starts and waits for its write; meanwhile broker 2 takes over.
            futures_lite::future::yield_now().await;
            assert!(!done.get());
            replica.assign(2, LeaderEpoch(4), 6, vec![1, 2, 3], vec![1, 2], 20);
            let answered = glommio::timer::timeout(Duration::from_secs(5), async { Ok(append.await) }).await;
            match answered.expect("the append waited for its timeout").unwrap() {
                Err(AppendError::Refused(refusal)) => assert_eq!(refusal, Refusal::NotLeaderOrFollower),
                other => panic!("{acks:?}: {other:?}"),
            }
        });
    }
}
