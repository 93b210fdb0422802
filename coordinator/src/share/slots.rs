//! Where a partition's leader keeps its share-partitions (`hosted::Partition::shares`):
//! one slot per share group, each behind an async lock, so that one operation at a
//! time (`serve::share_leader::run`) holds a share-partition across its reads and writes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::partition::SharePartition;

/// The share-partitions of one hosted partition, by share group.
#[derive(Default)]
pub struct Shares {
    groups: RefCell<HashMap<String, Rc<Slot>>>,
}

/// One share group's share-partition: empty until loaded in a leader epoch.
#[derive(Default)]
pub struct Slot {
    pub(crate) state: async_lock::Mutex<Option<Loaded>>,
}

/// A share-partition as loaded from its share coordinator.
pub struct Loaded {
    pub(crate) sp: SharePartition,
    /// The leader epoch it was loaded in: another epoch loads it again.
    pub(crate) leader_epoch: i32,
    /// The state epoch the coordinator gave it (a reset of the group's offsets moves it).
    pub(crate) state_epoch: i32,
}

impl Shares {
    pub(crate) fn slot(&self, group: &str) -> Rc<Slot> {
        self.groups.borrow_mut().entry(group.to_owned()).or_default().clone()
    }

    /// Forgets `group`'s slot when nothing holds it and nothing is loaded in it (its
    /// last session closed): the map does not keep every group that ever fetched.
    pub(crate) fn forget_idle(&self, group: &str) {
        let mut groups = self.groups.borrow_mut();
        let idle = groups.get(group).is_some_and(|slot| {
            Rc::strong_count(slot) == 1 && slot.state.try_lock().is_some_and(|state| state.is_none())
        });
        if idle {
            groups.remove(group);
        }
    }

    /// Share groups with a share-partition here.
    pub fn len(&self) -> usize {
        self.groups.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
