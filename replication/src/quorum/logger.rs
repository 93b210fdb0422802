//! raft-rs logs through `slog`; this drain hands its lines to `tracing` (target
//! `skein::quorum`), so they follow `SKEIN_LOG` like every other line.

use std::fmt::Write as _;

struct TracingDrain {
    node: u64,
}

/// Collects a record's key-value pairs into `key=value` text.
struct Fields(String);

impl slog::Serializer for Fields {
    fn emit_arguments(&mut self, key: slog::Key, value: &std::fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={value}");
        Ok(())
    }
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        let mut fields = Fields(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut fields);
        let _ = slog::KV::serialize(values, record, &mut fields);
        let (node, message, fields) = (self.node, record.msg(), fields.0);
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "skein::quorum", quorum_id = node, "{message}{fields}")
            }
            slog::Level::Warning => tracing::warn!(target: "skein::quorum", quorum_id = node, "{message}{fields}"),
            slog::Level::Info => tracing::info!(target: "skein::quorum", quorum_id = node, "{message}{fields}"),
            slog::Level::Debug => tracing::debug!(target: "skein::quorum", quorum_id = node, "{message}{fields}"),
            slog::Level::Trace => tracing::trace!(target: "skein::quorum", quorum_id = node, "{message}{fields}"),
        }
        Ok(())
    }
}

/// The logger raft-rs writes to for quorum member `node`.
pub fn logger(node: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain { node }, slog::o!())
}
