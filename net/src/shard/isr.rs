//! The ISR as its leader changes it, through the controller (AlterPartition, as
//! Kafka's `AlterPartitionManager`): the leader proposes a follower that caught up,
//! and drops followers not caught up for `replica.lag.time.max.ms`; one proposal per
//! partition is in flight at a time.

use std::rc::Rc;
use std::time::Duration;

use skein_control::errors::code;
use skein_control::metadata::controller::ControllerRequest;
use skein_engine::TopicPartition;
use skein_replication::{IsrProposal, Role};

use super::Shard;

/// How long a proposal waits for the controller's answer before it is sent again.
const ISR_CHANGE_WAIT: Duration = Duration::from_secs(5);

impl Shard {
    /// Proposes an ISR change for `partition`, which this shard leads, unless one is in
    /// flight already.
    pub fn propose_isr(self: &Rc<Self>, partition: &TopicPartition, proposal: IsrProposal) {
        let Some(state) = self.partition(partition) else { return };
        if state.isr_change_pending.replace(true) {
            return;
        }
        state.proposing(&proposal);
        let (leader, epoch, current) = {
            let replica = state.replica();
            (replica.broker(), replica.leader_epoch().0, replica.isr().len())
        };
        let counter = if proposal.isr.len() < current { &self.metrics.isr_shrinks } else { &self.metrics.isr_expands };
        tracing::debug!(target: "skein::net", partition = %partition, isr = ?proposal.isr, partition_epoch = proposal.partition_epoch,
            high_watermark = state.replica().high_watermark().0, log_end = state.log().log_end_offset().0, "proposing an ISR");
        counter.set(counter.get() + 1);
        let request = ControllerRequest::AlterPartition {
            topic: partition.topic.clone(),
            partition: partition.partition,
            leader,
            leader_epoch: epoch,
            partition_epoch: proposal.partition_epoch,
            isr: proposal.isr,
        };
        let (shard, partition) = (self.clone(), partition.clone());
        glommio::spawn_local(async move {
            // As Kafka's AlterPartitionManager, the request is sent again until it is
            // answered (a controller that went away with it never answers), while this
            // replica still leads in the epoch it was made in: a change the controller
            // committed must never be taken for a failed one.
            loop {
                let outcome = futures_lite::future::or(async { Some(shard.control(request.clone()).await) }, async {
                    glommio::timer::sleep(ISR_CHANGE_WAIT).await;
                    None
                })
                .await;
                match outcome {
                    Some(Ok(_)) => {}
                    // The partition moved on (a newer partition epoch): the metadata that
                    // says how reaches this replica and settles the joining followers.
                    Some(Err((code::INVALID_UPDATE_VERSION, _))) => {}
                    Some(Err((code, message))) => {
                        tracing::debug!(target: "skein::net", partition = %partition, code, message, "ISR change refused");
                        state.isr_proposal_failed();
                    }
                    None => {
                        let replica = state.replica();
                        if replica.role() == Role::Leader && replica.leader_epoch().0 == epoch {
                            drop(replica);
                            tracing::debug!(target: "skein::net", partition = %partition, "ISR change unanswered; sending it again");
                            continue;
                        }
                    }
                }
                break;
            }
            state.isr_change_pending.set(false);
        })
        .detach();
    }

    /// Proposes dropping followers that have not caught up for `lag_time_max_ms` from the
    /// ISR of each partition this shard leads.
    pub fn shrink_isrs(self: &Rc<Self>, lag_time_max_ms: i64) {
        let now = skein_engine::log::now_ms();
        // Collected first: proposing takes the shard's state again.
        let mut proposals = Vec::new();
        self.for_each_hosted(|partition, state| {
            if let Some(proposal) = state.replica().isr_shrink(now, lag_time_max_ms) {
                proposals.push((partition.clone(), proposal));
            }
        });
        for (partition, proposal) in proposals {
            tracing::info!(target: "skein::net", partition = %partition, isr = ?proposal.isr, "followers fell behind: shrinking the ISR");
            self.propose_isr(&partition, proposal);
        }
    }
}
