//! Tasks of a streams group: the target assignment the coordinator computes (a sticky
//! assignor, Kafka 4.4's `sticky` by name) and the reconciliation that moves each
//! member to it, as Kafka's streams `CurrentAssignmentBuilder` does. A member first
//! revokes what it must give up, keeping its epoch; it gets a task only once no other
//! member holds it (an active task once its previous owner revoked it, a standby
//! once no other member of the same process holds the task); then it moves to the
//! assignment epoch.

use std::collections::{BTreeMap, BTreeSet};

/// Tasks by subtopology id: the partitions of its input topics.
pub type TaskSet = BTreeMap<String, BTreeSet<i32>>;

/// A member's active, standby and warm-up tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tasks {
    pub active: TaskSet,
    pub standby: TaskSet,
    pub warmup: TaskSet,
}

fn contains(set: &TaskSet, sub: &str, partition: i32) -> bool {
    set.get(sub).is_some_and(|p| p.contains(&partition))
}

fn insert(set: &mut TaskSet, sub: &str, partition: i32) {
    set.entry(sub.to_owned()).or_default().insert(partition);
}

fn count(set: &TaskSet) -> usize {
    set.values().map(BTreeSet::len).sum()
}

impl Tasks {
    pub fn is_empty(&self) -> bool {
        count(&self.active) + count(&self.standby) + count(&self.warmup) == 0
    }

    /// Whether any task of `other` (of the same kind) is among these.
    pub fn contains_any(&self, other: &Tasks) -> bool {
        let any = |mine: &TaskSet, theirs: &TaskSet| {
            theirs.iter().any(|(sub, parts)| parts.iter().any(|p| contains(mine, sub, *p)))
        };
        any(&self.active, &other.active) || any(&self.standby, &other.standby) || any(&self.warmup, &other.warmup)
    }

    /// Whether every task of these is among `other`'s (of the same kind).
    pub fn within(&self, other: &Tasks) -> bool {
        let all = |mine: &TaskSet, theirs: &TaskSet| {
            mine.iter().all(|(sub, parts)| parts.iter().all(|p| contains(theirs, sub, *p)))
        };
        all(&self.active, &other.active) && all(&self.standby, &other.standby) && all(&self.warmup, &other.warmup)
    }

    fn union(mut self, other: &Tasks) -> Tasks {
        for (mine, theirs) in
            [(&mut self.active, &other.active), (&mut self.standby, &other.standby), (&mut self.warmup, &other.warmup)]
        {
            for (sub, parts) in theirs {
                mine.entry(sub.clone()).or_default().extend(parts);
            }
        }
        self
    }
}

/// What the assignor knows of a member.
pub struct Candidate<'a> {
    pub id: &'a str,
    pub process: &'a str,
    /// What it holds now, to keep tasks where they are.
    pub current: &'a Tasks,
}

/// The target assignment: every task of `tasks` (task count by subtopology) active on
/// one member, balanced over the members with each keeping what it holds where the
/// balance allows, and `standbys` standby copies of each on members of other processes.
pub fn assign(tasks: &BTreeMap<String, i32>, members: &[Candidate<'_>], standbys: usize) -> BTreeMap<String, Tasks> {
    let mut out: BTreeMap<String, Tasks> = members.iter().map(|m| (m.id.to_owned(), Tasks::default())).collect();
    if members.is_empty() {
        return out;
    }
    let all: Vec<(&String, i32)> = tasks.iter().flat_map(|(sub, n)| (0..*n).map(move |p| (sub, p))).collect();
    let quota = all.len().div_ceil(members.len());
    let mut load: BTreeMap<&str, usize> = members.iter().map(|m| (m.id, 0)).collect();
    let process_of: BTreeMap<&str, &str> = members.iter().map(|m| (m.id, m.process)).collect();
    let mut left = Vec::new();
    // Sticky: a task stays with the member that runs it, up to the quota.
    for &(sub, p) in &all {
        let keeper = members.iter().find(|m| contains(&m.current.active, sub, p) && load[m.id] < quota);
        match keeper {
            Some(m) => {
                insert(&mut out.get_mut(m.id).expect("member").active, sub, p);
                *load.get_mut(m.id).expect("member") += 1;
            }
            None => left.push((sub, p)),
        }
    }
    let mut process_load: BTreeMap<&str, usize> = BTreeMap::new();
    for m in members {
        *process_load.entry(m.process).or_default() += load[m.id];
    }
    // The rest to the least loaded member, then the least loaded process.
    for (sub, p) in left {
        let Some(m) = members.iter().min_by_key(|m| (load[m.id], process_load[m.process], m.id)) else { break };
        insert(&mut out.get_mut(m.id).expect("member").active, sub, p);
        *load.get_mut(m.id).expect("member") += 1;
        *process_load.get_mut(m.process).expect("process") += 1;
    }
    // Standbys on processes that have no copy of the task yet.
    for _ in 0..standbys {
        for &(sub, p) in &all {
            let holders: BTreeSet<&str> = out
                .iter()
                .filter(|(_, t)| contains(&t.active, sub, p) || contains(&t.standby, sub, p))
                .map(|(id, _)| process_of[id.as_str()])
                .collect();
            let pick = members.iter().filter(|m| !holders.contains(m.process)).min_by_key(|m| {
                (!contains(&m.current.standby, sub, p), count(&out[m.id].standby) + count(&out[m.id].active), m.id)
            });
            if let Some(m) = pick {
                insert(&mut out.get_mut(m.id).expect("member").standby, sub, p);
            }
        }
    }
    out
}

/// A member's reconciliation state, as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    /// It must first revoke tasks; its epoch stays.
    UnrevokedTasks,
    /// Tasks of its target are still held by others.
    UnreleasedTasks,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedTasks => "UNREVOKED_TASKS",
            MemberState::UnreleasedTasks => "UNRELEASED_TASKS",
        }
    }
}

/// Where a member stands in its reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub epoch: i32,
    pub state: MemberState,
    pub assigned: Tasks,
    pub pending_revocation: Tasks,
}

/// Who holds a task now, besides the member being reconciled: the process of its
/// active holder, and the processes of its standby and warm-up holders.
pub trait Holders {
    fn active(&self, sub: &str, partition: i32) -> Option<&str>;
    fn replicas(&self, sub: &str, partition: i32) -> Vec<&str>;
}

/// The next step of a member towards `target` at `target_epoch`, given the tasks it
/// reported owning (`None`: not reported in this heartbeat, so not released).
pub fn reconcile(
    now: &Progress,
    process: &str,
    target_epoch: i32,
    target: &Tasks,
    owned: Option<&Tasks>,
    holders: &dyn Holders,
) -> Progress {
    let not_released = |revoking: &Tasks| owned.is_none_or(|o| o.contains_any(revoking));
    match now.state {
        MemberState::Stable if now.epoch == target_epoch => now.clone(),
        MemberState::UnrevokedTasks if not_released(&now.pending_revocation) => now.clone(),
        _ => next(now, process, target_epoch, target, &not_released, holders),
    }
}

/// One kind of task (active, standby, warm-up): how to read it, how to change it,
/// and whether another member still holds a task of it.
type Kind<'a> = (fn(&Tasks) -> &TaskSet, fn(&mut Tasks) -> &mut TaskSet, &'a dyn Fn(&str, i32) -> bool);

fn next(
    now: &Progress,
    process: &str,
    target_epoch: i32,
    target: &Tasks,
    not_released: &dyn Fn(&Tasks) -> bool,
    holders: &dyn Holders,
) -> Progress {
    let mut assigned = Tasks::default();
    let mut revoke = Tasks::default();
    let mut grant = Tasks::default();
    let mut unreleased = false;
    let unreleased_active =
        |sub: &str, p: i32| holders.active(sub, p).is_some() || holders.replicas(sub, p).contains(&process);
    let unreleased_replica =
        |sub: &str, p: i32| holders.active(sub, p) == Some(process) || holders.replicas(sub, p).contains(&process);
    let kinds: [Kind<'_>; 3] = [
        (|t| &t.active, |t| &mut t.active, &unreleased_active),
        (|t| &t.standby, |t| &mut t.standby, &unreleased_replica),
        (|t| &t.warmup, |t| &mut t.warmup, &unreleased_replica),
    ];
    for (get, get_mut, is_unreleased) in kinds {
        let (current, wanted) = (get(&now.assigned), get(target));
        for (sub, parts) in current {
            for &p in parts {
                if contains(wanted, sub, p) {
                    insert(get_mut(&mut assigned), sub, p);
                } else {
                    insert(get_mut(&mut revoke), sub, p);
                }
            }
        }
        for (sub, parts) in wanted {
            for &p in parts.iter().filter(|p| !contains(current, sub, **p)) {
                if is_unreleased(sub, p) {
                    unreleased = true;
                } else {
                    insert(get_mut(&mut grant), sub, p);
                }
            }
        }
    }
    let waiting = if unreleased { MemberState::UnreleasedTasks } else { MemberState::Stable };
    if !revoke.is_empty() && not_released(&revoke) {
        return Progress { epoch: now.epoch, state: MemberState::UnrevokedTasks, assigned, pending_revocation: revoke };
    }
    Progress {
        epoch: target_epoch,
        state: waiting,
        assigned: assigned.union(&grant),
        pending_revocation: Tasks::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Held(BTreeMap<(String, i32), String>);

    impl Holders for Held {
        fn active(&self, sub: &str, partition: i32) -> Option<&str> {
            self.0.get(&(sub.to_owned(), partition)).map(String::as_str)
        }
        fn replicas(&self, _: &str, _: i32) -> Vec<&str> {
            Vec::new()
        }
    }

    fn tasks(active: &[(&str, i32)]) -> Tasks {
        let mut t = Tasks::default();
        for (sub, p) in active {
            insert(&mut t.active, sub, *p);
        }
        t
    }

    #[test]
    fn balanced_and_sticky() {
        let subs = BTreeMap::from([("0".to_string(), 4), ("1".to_string(), 4)]);
        let empty = Tasks::default();
        let one = [Candidate { id: "a", process: "p1", current: &empty }];
        let first = assign(&subs, &one, 0);
        assert_eq!(count(&first["a"].active), 8);
        // A second member takes half, and the first keeps the rest of what it had.
        let a_now = first["a"].clone();
        let two = [
            Candidate { id: "a", process: "p1", current: &a_now },
            Candidate { id: "b", process: "p2", current: &empty },
        ];
        let second = assign(&subs, &two, 1);
        assert_eq!((count(&second["a"].active), count(&second["b"].active)), (4, 4));
        assert!(tasks(&[]).within(&second["a"]));
        assert!(second["a"].active.iter().all(|(s, ps)| ps.iter().all(|p| contains(&a_now.active, s, *p))));
        // One standby each, never on the active's process.
        assert_eq!(count(&second["b"].standby), 4);
        for (s, ps) in &second["b"].standby {
            assert!(ps.iter().all(|p| contains(&second["a"].active, s, *p)));
        }
    }

    #[test]
    fn revoke_first_then_receive_once_released() {
        let progress = Progress {
            epoch: 1,
            state: MemberState::Stable,
            assigned: tasks(&[("0", 0), ("0", 1)]),
            pending_revocation: Tasks::default(),
        };
        let target = tasks(&[("0", 0), ("0", 2)]);
        let nobody = Held(BTreeMap::new());
        // Task 1 must go first: the epoch stays and nothing new is granted.
        let step = reconcile(&progress, "p1", 2, &target, None, &nobody);
        assert_eq!(step.state, MemberState::UnrevokedTasks);
        assert_eq!((step.epoch, step.assigned.clone()), (1, tasks(&[("0", 0)])));
        // Still owned: no change.
        let owned = tasks(&[("0", 0), ("0", 1)]);
        assert_eq!(reconcile(&step, "p1", 2, &target, Some(&owned), &nobody), step);
        // Released, but task 2 is still active on another member: the epoch moves
        // and the member waits for it.
        let held = Held(BTreeMap::from([(("0".to_string(), 2), "p2".to_string())]));
        let released = tasks(&[("0", 0)]);
        let waiting = reconcile(&step, "p1", 2, &target, Some(&released), &held);
        assert_eq!((waiting.epoch, waiting.state), (2, MemberState::UnreleasedTasks));
        assert_eq!(waiting.assigned, tasks(&[("0", 0)]));
        let done = reconcile(&waiting, "p1", 2, &target, Some(&released), &nobody);
        assert_eq!((done.epoch, done.state, done.assigned), (2, MemberState::Stable, target));
    }
}
