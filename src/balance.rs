//! Load-aware placement of partitions on this node's shards: measure, plan, move.
//!
//! Load is measured, not counted. Each partition's operations are timed on the shard
//! that owns it (`Partition::busy_ns`: the time spent polling them, which is the CPU
//! the shard gives that partition), and each shard's busy share comes from glommio's
//! executor statistics (`reactor::Health::runtime_us`). What a shard does that no
//! partition explains (its connections' reads, decoding and writes, housekeeping)
//! stays on it when partitions leave, so the plan moves only the partitions' share.
//! Bytes in and out and requests per second are measured with it and shown beside.
//!
//! The plan is greedy, as Kafka's and Redpanda's partition balancers are: while the
//! busiest and the idlest shard differ by more than the band, move from the busiest
//! to the idlest the partition that leaves the two closest, if that narrows their gap
//! by at least `BALANCE_GAIN_MIN`. A partition moves at most once per plan.
//!
//! Three users: `skein placement balance` (admin endpoint, `--dry-run|--apply`), the
//! background balancer (`--auto-balance`: one move per round, only after the gap has
//! stayed outside the band for `AUTO_BALANCE_ROUNDS_OVER` rounds in a row), and a
//! restart with another `--cores`, which evens the partition counts out over the
//! shards (no load is known yet).

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use skein_engine::TopicPartition;
use skein_net::shard::ops;
use skein_net::Shard;

/// A plan stops once the busiest and idlest shards' busy shares (fractions of a
/// core) are this close, unless told another band.
pub const BALANCE_BAND: f64 = 0.15;

/// A move must narrow the gap between its two shards by at least this much (a share
/// of a core), so that noise does not move partitions back and forth.
pub const BALANCE_GAIN_MIN: f64 = 0.02;

/// Moves in one plan from `skein placement balance`.
pub const BALANCE_MOVES_MAX: usize = 16;

/// Rounds in a row the background balancer must see the shards outside the band
/// before it moves a partition (hysteresis). It then moves one, and measures afresh.
pub const AUTO_BALANCE_ROUNDS_OVER: u32 = 2;

/// Plans a restart with another shard count tries before leaving the partitions
/// where they are until the next start (one second apart).
pub const REDISTRIBUTE_ATTEMPTS: u32 = 30;

/// The file in the data directory that holds how many shards the node ran last, so a
/// restart with another `--cores` redistributes its partitions.
pub const PLACED_SHARDS_FILE: &str = "placement-shards";

/// One partition's measured load.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionLoad {
    pub partition: TopicPartition,
    pub shard: usize,
    /// The share of a core its shard spent on its operations.
    pub busy: f64,
    pub bytes_in_per_s: f64,
    pub bytes_out_per_s: f64,
    pub requests_per_s: f64,
}

/// What a measurement saw: each shard's busy share and each partition's load.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub shards_busy: Vec<f64>,
    pub partitions: Vec<PartitionLoad>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub partition: TopicPartition,
    pub source: usize,
    pub target: usize,
    /// The load that goes with it.
    pub busy: f64,
}

/// The moves, and each shard's load before and after them (as predicted).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub before: Vec<f64>,
    pub after: Vec<f64>,
    pub moves: Vec<Move>,
}

impl Plan {
    /// The gap between the busiest and the idlest shard after the moves.
    pub fn spread_after(&self) -> f64 {
        spread(&self.after)
    }
}

fn spread(loads: &[f64]) -> f64 {
    let max = loads.iter().copied().fold(f64::MIN, f64::max);
    let min = loads.iter().copied().fold(f64::MAX, f64::min);
    if loads.is_empty() {
        0.0
    } else {
        max - min
    }
}

/// Plans at most `moves_max` moves that bring the shards' loads within `band` of each
/// other. `shards` holds each shard's load, of which each partition's `busy` is part.
pub fn plan(shards: &[f64], partitions: &[PartitionLoad], band: f64, gain_min: f64, moves_max: usize) -> Plan {
    let mut load = shards.to_vec();
    let mut owner: Vec<usize> = partitions.iter().map(|p| p.shard).collect();
    let mut moved = vec![false; partitions.len()];
    let mut moves = Vec::new();
    while moves.len() < moves_max && load.len() > 1 {
        let by_load = |a: &(usize, &f64), b: &(usize, &f64)| a.1.total_cmp(b.1);
        let (Some((hot, &hot_load)), Some((cold, &cold_load))) =
            (load.iter().enumerate().max_by(by_load), load.iter().enumerate().min_by(by_load))
        else {
            break;
        };
        let gap = hot_load - cold_load;
        if gap <= band {
            break;
        }
        // The partition on the busiest shard whose move leaves the pair closest.
        let best = (0..partitions.len())
            .filter(|&i| owner[i] == hot && !moved[i] && partitions[i].busy > 0.0 && partitions[i].busy < gap)
            .min_by(|&a, &b| {
                let left = |i: usize| (gap - 2.0 * partitions[i].busy).abs();
                left(a).total_cmp(&left(b))
            });
        let Some(i) = best else { break };
        let busy = partitions[i].busy;
        if gap - (gap - 2.0 * busy).abs() < gain_min {
            break;
        }
        load[hot] -= busy;
        load[cold] += busy;
        owner[i] = cold;
        moved[i] = true;
        moves.push(Move { partition: partitions[i].partition.clone(), source: hot, target: cold, busy });
    }
    Plan { before: shards.to_vec(), after: load, moves }
}

/// A plan that evens out partition counts (each partition weighs one), for a node
/// whose shard count changed.
pub fn plan_by_count(shards: usize, placed: &[(TopicPartition, usize)]) -> Plan {
    let mut counts = vec![0.0; shards];
    let partitions: Vec<PartitionLoad> = placed
        .iter()
        .map(|(partition, shard)| {
            counts[*shard] += 1.0;
            PartitionLoad {
                partition: partition.clone(),
                shard: *shard,
                busy: 1.0,
                bytes_in_per_s: 0.0,
                bytes_out_per_s: 0.0,
                requests_per_s: 0.0,
            }
        })
        .collect();
    plan(&counts, &partitions, 1.0, 0.5, usize::MAX)
}

/// One reading of every hosted partition's counters and every shard's runtime.
struct Reading {
    at: Instant,
    runtime_us: Vec<u64>,
    /// Each hosted partition's counters, by partition and the shard it is on.
    partitions: std::collections::HashMap<(TopicPartition, usize), ops::PartitionStats>,
}

/// The partitions this node hosts, with the shard each is on.
pub fn hosted(shard: &Shard) -> Vec<(TopicPartition, usize)> {
    let image = shard.image();
    let node = shard.settings.node_id;
    let mut hosted = Vec::new();
    for topic in image.topics.values() {
        for (p, &owner) in topic.shards.iter().enumerate() {
            if topic.is_replica(p as i32, node) {
                hosted.push((TopicPartition::new(topic.name.clone(), p as i32), owner));
            }
        }
    }
    hosted
}

async fn read(shard: &Rc<Shard>) -> Reading {
    // All at once: the channels between shards bound what is in flight.
    let asks = hosted(shard).into_iter().map(|(partition, owner)| async move {
        let stats = shard.call_on(owner, partition.clone(), ops::Stats).await.ok()?;
        Some(((partition, owner), stats))
    });
    let partitions = futures_util::future::join_all(asks).await.into_iter().flatten().collect();
    let runtime_us =
        (0..shard.settings.shards).map(|id| crate::reactor::health(id).runtime_us.load(Ordering::Relaxed)).collect();
    Reading { at: Instant::now(), runtime_us, partitions }
}

/// Measures each shard's busy share and each partition's load over `interval`. A
/// partition that moved meanwhile (its counters start again on its new shard) is left
/// out: its load is unknown this time.
pub async fn measure(shard: &Rc<Shard>, interval: Duration) -> Measured {
    let before = read(shard).await;
    glommio::timer::sleep(interval).await;
    let after = read(shard).await;
    let seconds = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
    let shards_busy = after
        .runtime_us
        .iter()
        .zip(&before.runtime_us)
        .map(|(now, then)| (now.saturating_sub(*then) as f64 / 1e6 / seconds).min(1.0))
        .collect();
    let mut partitions = Vec::new();
    for ((partition, owner), now) in after.partitions {
        // A partition moved or reopened meanwhile (its counters restarted) is left out.
        let Some(then) = before.partitions.get(&(partition.clone(), owner)) else { continue };
        if now.bytes_in < then.bytes_in
            || now.bytes_out < then.bytes_out
            || now.requests < then.requests
            || now.busy_us < then.busy_us
        {
            continue;
        }
        let rate = |now: u64, then: u64| (now - then) as f64 / seconds;
        partitions.push(PartitionLoad {
            busy: rate(now.busy_us, then.busy_us) / 1e6,
            bytes_in_per_s: rate(now.bytes_in, then.bytes_in),
            bytes_out_per_s: rate(now.bytes_out, then.bytes_out),
            requests_per_s: rate(now.requests, then.requests),
            partition,
            shard: owner,
        });
    }
    // In the order the plan and the report list them.
    partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
    Measured { shards_busy, partitions }
}

/// Makes the plan's moves one after the other; each gives its outcome.
pub async fn apply(shard: &Rc<Shard>, plan: &Plan) -> Vec<Result<(), String>> {
    let mut outcomes = Vec::new();
    for m in &plan.moves {
        let outcome = skein_net::topics::move_partition(shard, &m.partition, m.target).await;
        outcomes.push(outcome.map_err(|(code, message)| format!("{message} (error {code})")));
    }
    outcomes
}

/// The plan and what measured it, as the admin endpoint answers.
pub fn to_json(measured: &Measured, plan: &Plan, outcomes: Option<&[Result<(), String>]>) -> serde_json::Value {
    let shards: Vec<serde_json::Value> = plan
        .before
        .iter()
        .zip(&plan.after)
        .enumerate()
        .map(|(id, (before, after))| serde_json::json!({ "shard": id, "busy": before, "busy_after": after }))
        .collect();
    let partitions: Vec<serde_json::Value> = measured
        .partitions
        .iter()
        .map(|p| {
            serde_json::json!({
                "topic": p.partition.topic, "partition": p.partition.partition, "shard": p.shard,
                "busy": p.busy, "bytes_in_per_s": p.bytes_in_per_s, "bytes_out_per_s": p.bytes_out_per_s,
                "requests_per_s": p.requests_per_s,
            })
        })
        .collect();
    let moves: Vec<serde_json::Value> = plan
        .moves
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut row = serde_json::json!({
                "topic": m.partition.topic, "partition": m.partition.partition,
                "source": m.source, "target": m.target, "busy": m.busy,
            });
            if let Some(outcome) = outcomes.and_then(|o| o.get(i)) {
                row["result"] = match outcome {
                    Ok(()) => "moved".into(),
                    Err(e) => e.clone().into(),
                };
            }
            row
        })
        .collect();
    serde_json::json!({
        "shards": shards, "partitions": partitions, "moves": moves,
        "spread_before": spread(&plan.before), "spread_after": plan.spread_after(),
    })
}

/// The background balancer (`--auto-balance`), on shard 0: measures every `interval`
/// and, once the shards have stayed outside `band` for `AUTO_BALANCE_ROUNDS_OVER`
/// rounds in a row, moves the one partition that narrows the gap most.
pub async fn auto_balance_task(shard: Rc<Shard>, interval: Duration, band: f64) {
    let mut rounds_over = 0;
    loop {
        let measured = measure(&shard, interval).await;
        let proposal = plan(&measured.shards_busy, &measured.partitions, band, BALANCE_GAIN_MIN, 1);
        if proposal.moves.is_empty() {
            rounds_over = 0;
            continue;
        }
        rounds_over += 1;
        if rounds_over < AUTO_BALANCE_ROUNDS_OVER {
            continue;
        }
        rounds_over = 0;
        let m = &proposal.moves[0];
        match skein_net::topics::move_partition(&shard, &m.partition, m.target).await {
            Ok(()) => tracing::info!(target: "skein", partition = %m.partition, source = m.source, target = m.target,
                busy = format!("{:.3}", m.busy), before = ?rounded(&proposal.before), after = ?rounded(&proposal.after),
                "auto-balance moved a partition"),
            Err((code, message)) => tracing::warn!(target: "skein", partition = %m.partition, code, message,
                "auto-balance could not move a partition"),
        }
    }
}

fn rounded(loads: &[f64]) -> Vec<f64> {
    loads.iter().map(|l| (l * 1000.0).round() / 1000.0).collect()
}

/// The shard count the node ran with last (`PLACED_SHARDS_FILE`), if recorded. Read
/// at start, before the shards run.
pub fn placed_shards(data_dir: &std::path::Path) -> Option<usize> {
    std::fs::read_to_string(data_dir.join(PLACED_SHARDS_FILE)).ok()?.trim().parse().ok()
}

/// On shard 0 once every shard is ready: when the node last ran another number of
/// shards, evens its partitions out over the shards it runs now (online moves, as
/// `skein placement move` makes them), then records the count.
pub async fn redistribute_after_start(shard: Rc<Shard>, ready: Arc<AtomicUsize>, placed: Option<usize>) {
    let shards = shard.settings.shards;
    while ready.load(Ordering::Acquire) < shards {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    if placed.is_some_and(|placed| placed != shards) {
        // In a cluster a move needs the controller, which may still be electing: a
        // failed move is planned again, for a while.
        let mut failed = 0;
        for attempt in 0..REDISTRIBUTE_ATTEMPTS {
            if attempt > 0 {
                glommio::timer::sleep(Duration::from_secs(1)).await;
            }
            let proposal = plan_by_count(shards, &hosted(&shard));
            let outcomes = apply(&shard, &proposal).await;
            failed = outcomes.iter().filter(|o| o.is_err()).count();
            tracing::info!(target: "skein", from = placed, to = shards, moved = outcomes.len() - failed, failed,
                "partitions redistributed over the shards");
            if failed == 0 {
                break;
            }
        }
        if failed > 0 {
            // Recorded only once every move is made, so the next start tries again.
            return;
        }
    }
    if placed != Some(shards) {
        if let Err(e) = shard.logs.write_file(PLACED_SHARDS_FILE, format!("{shards}\n").as_bytes()).await {
            tracing::warn!(target: "skein", error = %e, "cannot record the shard count");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(topic: &str, p: i32, shard: usize, busy: f64) -> PartitionLoad {
        PartitionLoad {
            partition: TopicPartition::new(topic, p),
            shard,
            busy,
            bytes_in_per_s: 0.0,
            bytes_out_per_s: 0.0,
            requests_per_s: 0.0,
        }
    }

    // Four equal partitions on one of two shards: two move, the loads meet.
    #[test]
    fn skewed_load_is_split() {
        let partitions: Vec<_> = (0..4).map(|p| load("t", p, 0, 0.2)).collect();
        let plan = plan(&[0.9, 0.1], &partitions, BALANCE_BAND, BALANCE_GAIN_MIN, 16);
        assert_eq!(plan.moves.len(), 2, "{plan:?}");
        assert!(plan.moves.iter().all(|m| m.source == 0 && m.target == 1));
        assert!(plan.spread_after() <= BALANCE_BAND, "{plan:?}");
    }

    // The unexplained load stays: a shard busy with connections keeps its partitions
    // when moving one would only swap the imbalance.
    #[test]
    fn a_move_that_does_not_narrow_the_gap_is_not_made() {
        let partitions = vec![load("t", 0, 0, 0.6)];
        let plan = plan(&[0.7, 0.1], &partitions, BALANCE_BAND, BALANCE_GAIN_MIN, 16);
        assert!(plan.moves.is_empty(), "{plan:?}");
        // Within the band: nothing to do.
        let plan = super::plan(&[0.5, 0.4], &[load("t", 0, 0, 0.1)], BALANCE_BAND, BALANCE_GAIN_MIN, 16);
        assert!(plan.moves.is_empty());
    }

    // The partition chosen is the one that leaves the pair closest, and none moves twice.
    #[test]
    fn the_best_fitting_partition_moves() {
        let partitions = vec![load("a", 0, 0, 0.05), load("a", 1, 0, 0.3), load("a", 2, 0, 0.5)];
        let plan = plan(&[0.9, 0.3], &partitions, 0.05, BALANCE_GAIN_MIN, 16);
        assert_eq!(plan.moves[0].partition, TopicPartition::new("a", 1), "{plan:?}");
        let mut seen: Vec<_> = plan.moves.iter().map(|m| m.partition.clone()).collect();
        seen.dedup();
        assert_eq!(seen.len(), plan.moves.len());
    }

    // Growing from two shards to four and shrinking back even out the counts.
    #[test]
    fn counts_even_out_when_the_shards_change() {
        let placed: Vec<_> = (0..10).map(|p| (TopicPartition::new("t", p), (p % 2) as usize)).collect();
        let grown = plan_by_count(4, &placed);
        let mut counts = [0usize; 4];
        for (partition, shard) in &placed {
            let target = grown.moves.iter().find(|m| &m.partition == partition).map_or(*shard, |m| m.target);
            counts[target] += 1;
        }
        assert!(counts.iter().all(|&c| (2..=3).contains(&c)), "{counts:?}");
        assert_eq!(grown.moves.len(), 4, "only what must move moves: {grown:?}");
        let balanced: Vec<_> = (0..8).map(|p| (TopicPartition::new("t", p), (p % 4) as usize)).collect();
        assert!(plan_by_count(4, &balanced).moves.is_empty());
    }
}
