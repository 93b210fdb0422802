//! Produce on the partition's owner: the batch validated and admitted (`append::admit`),
//! a transaction's first batch verified with its coordinator, then appended as leader.

use std::rc::Rc;
use std::time::Duration;

use skein_control::errors::code;
use skein_engine::{Batch, TopicPartition};
use skein_replication as replication;

use super::ops::{self, Appended, Produced};
use super::{Partition, PartitionError, Shard};

impl Shard {
    pub(super) async fn produce(
        self: &Rc<Self>,
        partition: &TopicPartition,
        state: &Partition,
        produce: ops::Produce,
    ) -> Result<Produced, PartitionError> {
        let ops::Produce { batch: bytes, backing, acks, timeout_ms, transactional_id, version } = produce;
        let log = state.log();
        let max = log.config().max_message_bytes as usize;
        let batch = Batch::validate_fresh(bytes, max).map_err(skein_engine::Error::InvalidBatch)?.with_backing(backing);
        let rules = state.rules.get();
        if acks == -1 {
            state.check_insync(rules.min_insync_replicas.max(0) as usize)?;
        }
        let now = skein_engine::log::now_ms();
        let batch = match skein_control::append::admit(batch, &rules, &partition.to_string(), now) {
            Ok(batch) if batch.size() > max => {
                let message = format!("batch of {} bytes exceeds {max}", batch.size());
                return Err(PartitionError::with_message(code::MESSAGE_TOO_LARGE, message));
            }
            Ok(batch) => batch,
            Err(refused) => return Ok(Produced::Refused(Box::new(refused))),
        };
        // A transaction's first batch here: its coordinator must have it open with this
        // partition in it (KIP-890), so no transaction hangs on a partition it never
        // added. From Produce v12 the coordinator adds it (transaction version 2); a
        // batch of a later epoch than the open transaction's is the next transaction,
        // which the coordinator holds back (CONCURRENT_TRANSACTIONS) until this one's
        // marker is written.
        let (pid, epoch) = (batch.producer_id(), batch.producer_epoch());
        if batch.is_transactional() && !state.producers().in_transaction(pid, epoch) {
            let id = transactional_id.unwrap_or_default();
            let implicit = version >= FIRST_ADD_PARTITION_VERSION;
            let checked = self.check_txn(&id, (pid, epoch), partition, implicit).await;
            checked.map_err(|error| verification_error(error, version))?;
        }
        let append_time = rules.log_append_time;
        let size = batch.size() as u64;
        let acks_all = (acks == -1).then_some(replication::AcksAll {
            min_insync: rules.min_insync_replicas.max(1) as usize,
            timeout: Duration::from_millis(timeout_ms),
        });
        match state.append_as_leader(batch, acks_all).await {
            Ok(appended) => {
                if !appended.duplicate {
                    self.metrics.bytes_in.set(self.metrics.bytes_in.get() + size);
                    state.bytes_in.set(state.bytes_in.get() + size);
                }
                Ok(Produced::Appended(Appended {
                    base_offset: appended.base_offset.0,
                    log_append_time_ms: if append_time && !appended.duplicate { now } else { -1 },
                    log_start_offset: appended.log_start_offset.0,
                }))
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// The first Produce version whose transactional batches add their partition to the
/// transaction (Kafka's `ADD_PARTITION` operation).
const FIRST_ADD_PARTITION_VERSION: i16 = 12;

/// A coordinator's refusal of a transactional batch, as Kafka's `ReplicaManager`
/// answers it: PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE as
/// INVALID_TXN_STATE before v11, and a coordinator that could not be asked (or, before
/// v12, a transaction being completed) as the retriable NOT_ENOUGH_REPLICAS.
fn verification_error(error: i16, version: i16) -> PartitionError {
    let error = match error {
        code::PRODUCER_FENCED => code::INVALID_PRODUCER_EPOCH,
        code::TRANSACTION_ABORTABLE if version <= 10 => code::INVALID_TXN_STATE,
        error => error,
    };
    let unverified = matches!(
        error,
        code::NETWORK_EXCEPTION
            | code::COORDINATOR_LOAD_IN_PROGRESS
            | code::COORDINATOR_NOT_AVAILABLE
            | code::NOT_COORDINATOR
    ) || (error == code::CONCURRENT_TRANSACTIONS && version < FIRST_ADD_PARTITION_VERSION);
    if unverified {
        let message = format!(
            "Unable to verify the partition has been added to the transaction. Underlying error: {}",
            name(error)
        );
        return PartitionError::with_message(code::NOT_ENOUGH_REPLICAS, message);
    }
    if error == code::INVALID_TXN_STATE {
        return PartitionError::with_message(error, "Partition was not added to the transaction");
    }
    PartitionError::new(error)
}

/// Kafka's name of a coordinator error, for the message of `verification_error`.
fn name(error: i16) -> &'static str {
    match error {
        code::NETWORK_EXCEPTION => "NETWORK_EXCEPTION",
        code::COORDINATOR_LOAD_IN_PROGRESS => "COORDINATOR_LOAD_IN_PROGRESS",
        code::COORDINATOR_NOT_AVAILABLE => "COORDINATOR_NOT_AVAILABLE",
        code::NOT_COORDINATOR => "NOT_COORDINATOR",
        _ => "CONCURRENT_TRANSACTIONS",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka's `ReplicaManager` translation of a coordinator's refusal, by version.
    #[test]
    fn verification_errors_as_kafka_answers_them() {
        let answer = |error, version| {
            let e = verification_error(error, version);
            (e.code, e.message.unwrap_or_default())
        };
        assert_eq!(answer(code::PRODUCER_FENCED, 12).0, code::INVALID_PRODUCER_EPOCH);
        assert_eq!(answer(code::TRANSACTION_ABORTABLE, 10).0, code::INVALID_TXN_STATE);
        assert_eq!(answer(code::TRANSACTION_ABORTABLE, 11).0, code::TRANSACTION_ABORTABLE);
        let (error, message) = answer(code::INVALID_TXN_STATE, 12);
        assert_eq!((error, message.as_str()), (code::INVALID_TXN_STATE, "Partition was not added to the transaction"));
        for unasked in [code::NETWORK_EXCEPTION, code::COORDINATOR_NOT_AVAILABLE, code::NOT_COORDINATOR] {
            let (error, message) = answer(unasked, 12);
            assert_eq!(error, code::NOT_ENOUGH_REPLICAS);
            assert!(message.starts_with("Unable to verify the partition has been added"), "{message}");
        }
        // A transaction being completed: retriable for old clients, as it is for v12+.
        let (error, message) = answer(code::CONCURRENT_TRANSACTIONS, 11);
        assert_eq!(error, code::NOT_ENOUGH_REPLICAS);
        assert!(message.ends_with("CONCURRENT_TRANSACTIONS"), "{message}");
        assert_eq!(answer(code::CONCURRENT_TRANSACTIONS, 12).0, code::CONCURRENT_TRANSACTIONS);
    }
}
