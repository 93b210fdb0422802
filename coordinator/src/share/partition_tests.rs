//! The share-partition state machine's tests (`partition.rs`): every rule of its
//! module comment, driven with a fixed clock.

use super::*;

fn settings(max_in_flight: usize, delivery_limit: u16) -> ShareSettings {
    ShareSettings {
        max_in_flight,
        delivery_limit,
        lock_duration: Duration::from_secs(30),
        key_ordered: false,
        renew_enabled: true,
        dead_letter: false,
    }
}

fn range(first: i64, last: i64, deliveries: u16) -> Acquired {
    Acquired { first, last, deliveries }
}

use Acknowledge::*;

// Near the delivery limit (5: records delivered 3 times or more), records go out in
// smaller acquisitions, as Kafka 4.4 hands them out: the run of records that came
// back halved once per delivery past the threshold, and a record on its last
// attempt alone. An acquisition cut short leaves the rest to be offered again.
#[test]
fn records_near_the_delivery_limit_go_out_in_smaller_acquisitions() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 5));
    for _ in 0..3 {
        let (got, complete) = sp.acquire_offered("m", (0..8).map(|o| (o, None)), 100, now);
        assert_eq!(got.iter().map(|a| a.last - a.first + 1).sum::<i64>(), 8);
        assert!(complete);
        sp.acknowledge("m", 0, 7, &[Release], now).unwrap();
    }
    let next = |sp: &mut SharePartition| {
        let from = sp.next_fetch_offset();
        sp.acquire_offered("n", (from..10).map(|o| (o, None)), 100, now)
    };
    assert_eq!(next(&mut sp), (vec![range(0, 3, 4)], false), "half the run of 8");
    sp.acknowledge("n", 0, 3, &[Release], now).unwrap();
    assert_eq!(next(&mut sp), (vec![range(0, 0, 5)], false), "its last attempt, alone");
    assert_eq!(next(&mut sp), (vec![range(1, 1, 5)], false));
    assert_eq!(next(&mut sp).0, vec![range(2, 2, 5)]);
    assert_eq!(next(&mut sp).0, vec![range(3, 3, 5)]);
    assert_eq!(next(&mut sp).0, vec![range(4, 5, 4)], "half the run of 4");
    assert_eq!(next(&mut sp).0, vec![range(6, 6, 4)]);
    assert_eq!(next(&mut sp).0, vec![range(7, 7, 4)]);
    assert_eq!(next(&mut sp), (vec![range(8, 9, 1)], true), "new records are not throttled");
}

// With a dead-letter topic, a rejected record and one released at the delivery
// limit go ARCHIVING: not delivered again, not finished (the start waits for them),
// handed to the dead-letter writer once, persisted as state 3 and handed again
// after a restore (a new leader), then archived.
#[test]
fn dead_letters_are_archiving_until_written() {
    let now = Instant::now();
    let mut with_dlq = settings(100, 2);
    with_dlq.dead_letter = true;
    let mut sp = SharePartition::new(0, with_dlq);
    assert_eq!(sp.acquire("m", 0..4, 100, now), vec![range(0, 3, 1)]);
    sp.acknowledge("m", 0, 0, &[Reject], now).unwrap();
    sp.acknowledge("m", 1, 3, &[Release], now).unwrap();
    assert_eq!(sp.acquire("m", 1..4, 100, now), vec![range(1, 3, 2)]);
    sp.acknowledge("m", 1, 1, &[Accept], now).unwrap();
    assert_eq!(sp.release_member("m"), 2, "2 and 3 come back at the limit");
    assert_eq!(sp.state(2), Some((RecordState::Archiving, 2)));
    assert_eq!(sp.start_offset(), 0, "ARCHIVING records are not finished");
    assert!(sp.acquire("n", 0..4, 100, now).is_empty(), "nor delivered again");
    let letters = sp.take_dead_letters();
    let cause = |first, last, deliveries, cause| DeadLetters { first, last, deliveries, cause };
    assert_eq!(
        letters,
        vec![cause(0, 0, 1, DeadLetterCause::Rejected), cause(2, 3, 2, DeadLetterCause::DeliveryLimit)]
    );
    assert!(sp.take_dead_letters().is_empty(), "handed out once");
    let (start, batches) = sp.state_batches();
    assert_eq!(batches[0].state as i8, 3, "persisted as Kafka's ARCHIVING");
    let mut restored = SharePartition::restore(start, &batches, with_dlq);
    assert_eq!(restored.take_dead_letters(), letters, "a new leader writes them again");
    assert!(sp.archive_dead_letters(0, 0));
    assert_eq!(sp.start_offset(), 2);
    assert!(sp.archive_dead_letters(2, 3));
    assert_eq!(sp.start_offset(), 4);
    assert!(!sp.archive_dead_letters(2, 3));
    // Without a dead-letter topic the same records are archived at once.
    let mut plain = SharePartition::new(0, settings(100, 2));
    plain.acquire("m", 0..1, 100, now);
    plain.acknowledge("m", 0, 0, &[Reject], now).unwrap();
    assert_eq!(plain.start_offset(), 1);
    assert!(plain.take_dead_letters().is_empty());
}

// Key-ordered delivery: while a member holds a key's record, no other member gets
// that key's later records, and they come in offset order once it is finished;
// other keys go on meanwhile. A released record goes out again before its key's
// later records.
#[test]
fn a_key_goes_to_one_member_at_a_time_in_order() {
    let now = Instant::now();
    let mut ordered = settings(100, 5);
    ordered.key_ordered = true;
    let mut sp = SharePartition::new(0, ordered);
    // Offsets 0..6 with keys a b a b c a.
    let keys = [1u64, 2, 1, 2, 3, 1];
    let read = |from: i64| (from..6).map(|o| (o, Some(keys[o as usize])));
    assert_eq!(sp.acquire_keyed("m", read(0), 1, now), vec![range(0, 0, 1)]);
    // n gets b and nothing of a (held by m); with two members acquiring, it takes
    // half the keys offered (b and c), so c is left for another.
    let got = sp.acquire_keyed("n", read(sp.next_fetch_offset()), 100, now);
    assert_eq!(got, vec![range(1, 1, 1), range(3, 3, 1)]);
    assert_eq!(sp.acquire_keyed("m", read(sp.next_fetch_offset()), 100, now), vec![range(4, 4, 1)]);
    sp.acknowledge("m", 4, 4, &[Accept], now).unwrap();
    assert_eq!(sp.state(2), Some((RecordState::Available, 0)), "a's next record waits");
    // m releases a: a's records go out again in order, the released one first.
    sp.acknowledge("m", 0, 0, &[Release], now).unwrap();
    let got = sp.acquire_keyed("n", read(sp.next_fetch_offset()), 100, now);
    assert_eq!(got, vec![range(0, 0, 2), range(2, 2, 1), range(5, 5, 1)]);
    // 500 random schedules: no key is ever held by two members.
    let mut seed = 7u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for _ in 0..500 {
        let mut sp = SharePartition::new(0, ordered);
        let keys: Vec<u64> = (0..40).map(|_| next(5)).collect();
        for _ in 0..30 {
            let member = ["x", "y", "z"][next(3) as usize];
            let from = sp.next_fetch_offset();
            sp.acquire_keyed(member, (from..40).map(|o| (o, Some(keys[o as usize]))), 1 + next(4) as usize, now);
            let held: Vec<(i64, String)> = (0..40)
                .filter_map(|o| {
                    sp.records
                        .get(&o)
                        .filter(|r| r.state == RecordState::Acquired)
                        .map(|r| (o, r.member.as_deref().unwrap().to_string()))
                })
                .collect();
            for (o, m) in &held {
                for (p, n) in &held {
                    if keys[*o as usize] == keys[*p as usize] {
                        assert_eq!(m, n, "key {} held by two members", keys[*o as usize]);
                    }
                }
            }
            if let Some((o, m)) = held.first() {
                let ack = if next(2) == 0 { Accept } else { Release };
                sp.acknowledge(m, *o, *o, &[ack], now).unwrap();
            }
        }
    }
}

// A member that fetched while there was nothing to take still counts: when records
// arrive, the first member to fetch takes only its share of the keys (here 10 keys,
// each twice, in one log batch offered whole) and leaves the rest to the others.
#[test]
fn a_member_waiting_for_records_keeps_its_share_of_the_keys() {
    let now = Instant::now();
    let mut ordered = settings(100, 5);
    ordered.key_ordered = true;
    let mut sp = SharePartition::new(0, ordered);
    sp.fetched_by("m", now);
    sp.fetched_by("n", now);
    let read = |from: i64| (from..20).map(|o| (o, Some(o as u64 % 10)));
    let first: usize =
        sp.acquire_keyed("m", read(0), usize::MAX, now).iter().map(|a| a.last - a.first + 1).sum::<i64>() as usize;
    assert_eq!(first, 10, "m takes 5 keys of 10, each twice");
    let second: usize = sp
        .acquire_keyed("n", read(sp.next_fetch_offset()), usize::MAX, now)
        .iter()
        .map(|a| a.last - a.first + 1)
        .sum::<i64>() as usize;
    assert_eq!(second, 6, "n takes its share (3) of the 5 keys m does not hold");
    // Without the earlier fetches, the first member takes every key.
    let mut alone = SharePartition::new(0, ordered);
    assert_eq!(alone.acquire_keyed("m", read(0), usize::MAX, now).len(), 1);
    assert_eq!(alone.next_fetch_offset(), 20);
}

#[test]
fn records_are_acquired_once_and_the_start_follows_what_is_finished() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 5));
    assert_eq!(sp.acquire("a", 0..5, 3, now), vec![range(0, 2, 1)]);
    assert_eq!(sp.next_fetch_offset(), 3);
    // What a first member holds is not acquired again by another.
    assert_eq!(sp.acquire("b", 0..10, 100, now), vec![range(3, 9, 1)]);
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.acquired()), (0, 10, 10));
    // Acknowledged out of order: the start waits for the front.
    sp.acknowledge("b", 3, 9, &[Accept], now).unwrap();
    assert_eq!(sp.start_offset(), 0);
    sp.acknowledge("a", 0, 2, &[Accept, Reject, Accept], now).unwrap();
    assert_eq!((sp.start_offset(), sp.acquired()), (10, 0));
    assert_eq!(sp.state(1), None, "finished records leave the window");
}

#[test]
fn released_records_come_back_until_the_delivery_limit_archives_them() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 3));
    sp.acquire("a", 0..2, 10, now);
    sp.acknowledge("a", 0, 1, &[Release], now).unwrap();
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(sp.acquire("b", 0..2, 10, now), vec![range(0, 1, 2)]);
    sp.acknowledge("b", 0, 1, &[Release], now).unwrap();
    // Each on its last attempt goes out alone.
    assert_eq!(sp.acquire("a", 0..2, 10, now), vec![range(0, 0, 3)]);
    assert_eq!(sp.acquire("a", 1..2, 10, now), vec![range(1, 1, 3)]);
    // The third delivery was the last: released again, the records are archived
    // and the start moves past them.
    sp.acknowledge("a", 0, 1, &[Release], now).unwrap();
    assert_eq!((sp.start_offset(), sp.next_fetch_offset()), (2, 2));
    assert!(sp.acquire("a", 0..2, 10, now).is_empty());
}

#[test]
fn an_expired_lock_makes_records_available_and_a_renewal_keeps_them() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 5));
    sp.acquire("a", 0..4, 10, now);
    assert_eq!(sp.next_expiry(), Some(now + Duration::from_secs(30)));
    sp.acknowledge("a", 2, 3, &[Renew], now + Duration::from_secs(20)).unwrap();
    assert_eq!(sp.expire(now + Duration::from_secs(31)), 2);
    assert_eq!(sp.state(0), Some((RecordState::Available, 1)));
    assert_eq!(sp.state(2), Some((RecordState::Acquired, 1)));
    // The expired records are fetched again; the renewed ones are still held.
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(sp.acquire("b", 0..4, 10, now + Duration::from_secs(31)), vec![range(0, 1, 2)]);
    // A member whose lock ran out can no longer acknowledge.
    assert_eq!(sp.acknowledge("a", 0, 0, &[Accept], now), Err(code::INVALID_RECORD_STATE));
    // The renewed locks (from 20 s) run out at 50 s; b's (from 31 s) at 61 s.
    assert_eq!(sp.expire(now + Duration::from_secs(51)), 2);
}

#[test]
fn an_acknowledgement_is_checked_whole_before_anything_changes() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 5));
    sp.acquire("a", 0..3, 10, now);
    sp.acquire("b", 3..5, 10, now);
    // 0..=4 spans b's records: refused, and a's 0..=2 stay acquired.
    assert_eq!(sp.acknowledge("a", 0, 4, &[Accept], now), Err(code::INVALID_RECORD_STATE));
    assert_eq!(sp.state(0), Some((RecordState::Acquired, 1)));
    assert_eq!(sp.acknowledge("a", 0, 5, &[Accept], now), Err(code::INVALID_RECORD_STATE), "past the end");
    assert_eq!(sp.acknowledge("a", 2, 1, &[Accept], now), Err(code::INVALID_REQUEST));
    assert_eq!(sp.acknowledge("a", 0, 2, &[Accept, Accept], now), Err(code::INVALID_REQUEST));
    sp.acknowledge("a", 0, 2, &[Accept], now).unwrap();
    assert_eq!(sp.acknowledge("a", 0, 0, &[Accept], now), Err(code::INVALID_RECORD_STATE), "twice");
}

#[test]
fn the_window_bounds_new_records_but_not_redeliveries() {
    let now = Instant::now();
    let mut sp = SharePartition::new(100, settings(4, 5));
    assert_eq!(sp.acquire("a", 100..110, 100, now), vec![range(100, 103, 1)]);
    assert!(sp.acquire("b", 104..110, 100, now).is_empty());
    sp.acknowledge("a", 100, 101, &[Accept, Release], now).unwrap();
    // One offset finished at the front: one new record fits, and the released
    // one is delivered again.
    assert_eq!(sp.acquire("b", 101..110, 100, now), vec![range(101, 101, 2), range(104, 104, 1)]);
    assert_eq!((sp.start_offset(), sp.end_offset()), (101, 105));
}

#[test]
fn gaps_are_never_delivered_and_finish_as_gaps() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 5));
    // Compaction left records at 0, 3 and 4 only.
    assert_eq!(sp.acquire("a", [0, 3, 4], 10, now), vec![range(0, 0, 1), range(3, 4, 1)]);
    assert_eq!(sp.acknowledge("a", 1, 1, &[Accept], now), Err(code::INVALID_RECORD_STATE));
    sp.acknowledge("a", 0, 4, &[Accept, Gap, Gap, Accept, Accept], now).unwrap();
    assert_eq!(sp.start_offset(), 5);
}

#[test]
fn a_member_that_leaves_gives_its_records_back() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 1));
    sp.acquire("a", 0..2, 10, now);
    sp.acquire("b", 2..4, 10, now);
    // A delivery limit of one: what a leaving member held is archived.
    assert_eq!(sp.release_member("a"), 2);
    assert_eq!((sp.start_offset(), sp.acquired()), (2, 2));
    assert_eq!(sp.release_member("nobody"), 0);
}

#[test]
fn the_persisted_state_restores_the_window_without_its_locks() {
    let now = Instant::now();
    let mut sp = SharePartition::new(10, settings(100, 3));
    sp.acquire("a", [10, 11, 12, 14, 15, 16], 10, now);
    sp.acknowledge("a", 11, 11, &[Accept], now).unwrap();
    sp.acknowledge("a", 12, 13, &[Release, Gap], now).unwrap();
    sp.acknowledge("a", 15, 15, &[Reject], now).unwrap();
    let (start, batches) = sp.state_batches();
    let batch = |first, last, state, deliveries| StateBatch { first, last, state, deliveries };
    assert_eq!(start, 10);
    assert_eq!(
        batches,
        vec![
            batch(10, 10, RecordState::Available, 1),
            batch(11, 11, RecordState::Acknowledged, 1),
            batch(12, 12, RecordState::Available, 1),
            batch(13, 13, RecordState::Archived, 0),
            batch(14, 14, RecordState::Available, 1),
            batch(15, 15, RecordState::Archived, 1),
            batch(16, 16, RecordState::Available, 1),
        ]
    );
    // A new leader: what was acquired is available, with its delivery counted.
    let mut restored = SharePartition::restore(start, &batches, sp.settings());
    assert_eq!((restored.start_offset(), restored.end_offset(), restored.acquired()), (10, 17, 0));
    assert_eq!(restored.state_batches(), (start, batches.clone()));
    assert_eq!(
        restored.acquire("b", 10..17, 10, now),
        vec![range(10, 10, 2), range(12, 12, 2), range(14, 14, 2), range(16, 16, 2)]
    );
    restored.acknowledge("b", 10, 10, &[Accept], now).unwrap();
    restored.acknowledge("b", 12, 12, &[Accept], now).unwrap();
    assert_eq!(restored.start_offset(), 14);
    // Batches below the start are dropped.
    let moved = SharePartition::restore(13, &batches, sp.settings());
    assert_eq!((moved.start_offset(), moved.next_fetch_offset()), (14, 14));
    // A damaged batch claiming the whole offset range takes a bounded window.
    let huge = [batch(0, i64::MAX, RecordState::Available, 1)];
    let bounded = SharePartition::restore(0, &huge, sp.settings());
    assert_eq!(bounded.end_offset(), RESTORED_WINDOW_MAX as i64);
}

#[test]
fn records_removed_from_the_log_leave_the_window() {
    let now = Instant::now();
    let mut sp = SharePartition::new(0, settings(100, 5));
    sp.acquire("a", 0..6, 10, now);
    sp.truncate_below(4);
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.acquired()), (4, 6, 2));
    sp.truncate_below(10);
    assert_eq!((sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()), (10, 10, 10));
    assert_eq!(Acknowledge::from_code(4), Some(Renew));
    assert_eq!(Acknowledge::from_code(5), None);
}

/// Random acquisitions, acknowledgements of every kind, expiries and departures
/// over 200 records, 500 seeds: a delivery count never goes backwards, an accepted
/// or archived record is never acquired again, nothing past the delivery limit is
/// delivered, the start never moves back, and in the end every record is accepted
/// or archived exactly once (what a checker of at-least-once delivery asks).
#[test]
fn random_schedules_keep_at_least_once_delivery() {
    const RECORDS: i64 = 200;
    for seed in 0..500u64 {
        let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = |n: u64| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        let start = Instant::now();
        let mut now = start;
        let limit = 1 + next(4) as u16;
        let mut sp = SharePartition::new(0, settings(1 + next(60) as usize, limit));
        let members = ["a", "b", "c"];
        let mut held: Vec<(String, i64)> = Vec::new();
        let mut deliveries = vec![0u16; RECORDS as usize];
        let mut finished = vec![0u32; RECORDS as usize];
        let mut last_start = 0;
        for _ in 0..2_000 {
            match next(10) {
                0..=3 => {
                    let member = members[next(3) as usize];
                    let from = sp.next_fetch_offset();
                    let got = sp.acquire(member, from..RECORDS, 1 + next(20) as usize, now);
                    for range in got {
                        for offset in range.first..=range.last {
                            let i = offset as usize;
                            assert_eq!(finished[i], 0, "seed {seed}: {offset} acquired after it finished");
                            assert!(range.deliveries > deliveries[i], "seed {seed}: count went back");
                            assert!(range.deliveries <= limit, "seed {seed}: delivered past the limit");
                            deliveries[i] = range.deliveries;
                            held.push((member.to_string(), offset));
                        }
                    }
                }
                4..=7 if !held.is_empty() => {
                    let (member, offset) = held.swap_remove(next(held.len() as u64) as usize);
                    let kind = [Accept, Release, Reject, Renew][next(4) as usize];
                    // Acknowledging after the lock ran out or the member left is refused.
                    match sp.acknowledge(&member, offset, offset, &[kind], now) {
                        Ok(()) if matches!(kind, Accept | Reject) => finished[offset as usize] += 1,
                        Ok(()) if kind == Renew => held.push((member, offset)),
                        Ok(()) => {}
                        Err(e) => assert_eq!(e, code::INVALID_RECORD_STATE),
                    }
                }
                8 => {
                    now += Duration::from_secs(next(40));
                    sp.expire(now);
                }
                _ => {
                    sp.release_member(members[next(3) as usize]);
                }
            }
            assert!(sp.start_offset() >= last_start, "seed {seed}: the start moved back");
            last_start = sp.start_offset();
        }
        // Drain: every record left is delivered until accepted or archived.
        for _ in 0..(RECORDS as usize * limit as usize + 10) {
            now += Duration::from_secs(60);
            sp.expire(now);
            let from = sp.next_fetch_offset();
            for range in sp.acquire("d", from..RECORDS, RECORDS as usize, now) {
                for offset in range.first..=range.last {
                    assert_eq!(finished[offset as usize], 0, "seed {seed}: {offset} delivered after it finished");
                    sp.acknowledge("d", offset, offset, &[Accept], now).unwrap();
                    finished[offset as usize] += 1;
                }
            }
        }
        assert_eq!(sp.start_offset(), RECORDS, "seed {seed}");
        // Records archived at the limit by an expiry or a release were finished by
        // the share-partition, not by a member: count them from the counts.
        for offset in 0..RECORDS as usize {
            let archived_at_limit = finished[offset] == 0 && deliveries[offset] >= limit;
            assert!(
                finished[offset] == 1 || archived_at_limit,
                "seed {seed}: {offset} finished {} times",
                finished[offset]
            );
        }
    }
}
