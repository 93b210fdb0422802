//! The admin HTTP endpoint, served by shard 0: `/metrics` (Prometheus text, series per
//! shard), `/v1/health`, `/v1/placement` (partition -> shard, JSON), `/v1/shards`
//! (each shard's reactor figures, JSON), `POST /v1/placement/move`, and
//! `/v1/placement/balance` (GET: a plan from measured load; POST: the plan, made).
//! Requests are parsed with `httparse`.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use skein_net::Shard;

/// Each shard's rendered metrics, rendered by the shard itself (its counters are
/// thread-local) when the admin endpoint asks (`fresh_board`), read by the endpoint: a
/// slot per shard, so that a shard's publish only ever waits for a `/metrics` read of
/// its own slot, never for another shard (no process-wide lock on a shard's thread).
/// Rendering walks every partition, so a node nobody scrapes renders nothing.
static BOARD: [Slot; crate::reactor::MAX_SHARDS] = [const { Slot::new() }; crate::reactor::MAX_SHARDS];

struct Slot {
    text: Mutex<String>,
    /// Set by a scrape, taken by the shard at its next tick.
    wanted: AtomicBool,
    /// Renders published so far, for the scrape to see this one's.
    published: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot { text: Mutex::new(String::new()), wanted: AtomicBool::new(false), published: AtomicU64::new(0) }
    }

    /// Stores `text` (the old text dropped outside the lock).
    fn store(&self, text: String) {
        let old = std::mem::replace(&mut *self.text.lock().unwrap_or_else(|e| e.into_inner()), text);
        drop(old);
        self.published.fetch_add(1, Ordering::Release);
    }
}

/// Renders and stores this shard's metrics if a scrape asked for them since the last
/// time (called at every tick of the shard's loop).
pub fn publish_if_wanted(shard: &Shard) {
    let Some(slot) = BOARD.get(shard.id) else { return };
    if slot.wanted.swap(false, Ordering::AcqRel) {
        slot.store(render(shard));
    }
}

/// The longest a scrape waits for the shards' fresh text; a shard that has not
/// rendered by then (stalled) shows its last text.
const SCRAPE_WAIT: Duration = Duration::from_secs(1);

/// Every shard's metrics text, in shard order, fresh: each of the `shards` renders at
/// its next tick (`publish_if_wanted`, within 100 ms), this one at once.
async fn fresh_board(shard: &Shard, shards: usize) -> String {
    let slots = &BOARD[..shards.min(BOARD.len())];
    let before: Vec<u64> = slots
        .iter()
        .map(|slot| {
            let published = slot.published.load(Ordering::Acquire);
            slot.wanted.store(true, Ordering::Release);
            published
        })
        .collect();
    publish_if_wanted(shard);
    let started = std::time::Instant::now();
    while started.elapsed() < SCRAPE_WAIT
        && slots.iter().zip(&before).any(|(slot, &before)| slot.published.load(Ordering::Acquire) == before)
    {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    slots.iter().fold(String::new(), |mut out, slot| {
        out.push_str(&slot.text.lock().unwrap_or_else(|e| e.into_inner()));
        out
    })
}

fn render(shard: &Shard) -> String {
    use std::fmt::Write;
    let id = shard.id;
    let mut out = String::new();
    let m = &shard.metrics;
    for (api, count) in m.requests.borrow().iter() {
        let _ = writeln!(out, "skein_requests_total{{shard=\"{id}\",api_key=\"{api}\"}} {count}");
    }
    for (api, count) in m.errors.borrow().iter() {
        let _ = writeln!(out, "skein_request_errors_total{{shard=\"{id}\",api_key=\"{api}\"}} {count}");
    }
    for (api, count) in m.encode_failures.borrow().iter() {
        let _ = writeln!(out, "skein_response_encode_failures_total{{shard=\"{id}\",api_key=\"{api}\"}} {count}");
    }
    for (api, latency) in m.latency.borrow().iter() {
        let mut cumulative = 0;
        for (i, bound) in skein_net::metrics::LATENCY_BUCKETS_US.iter().enumerate() {
            cumulative += latency.buckets[i];
            let _ = writeln!(
                out,
                "skein_request_latency_us_bucket{{shard=\"{id}\",api_key=\"{api}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "skein_request_latency_us_bucket{{shard=\"{id}\",api_key=\"{api}\",le=\"+Inf\"}} {}",
            latency.count
        );
        let _ = writeln!(out, "skein_request_latency_us_sum{{shard=\"{id}\",api_key=\"{api}\"}} {}", latency.sum_us);
        let _ = writeln!(out, "skein_request_latency_us_count{{shard=\"{id}\",api_key=\"{api}\"}} {}", latency.count);
    }
    let reactor = crate::reactor::health(id);
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(out, "skein_reactor_stalls_total{{shard=\"{id}\"}} {}", load(&reactor.stalls));
    let _ =
        writeln!(out, "skein_reactor_busy_ratio{{shard=\"{id}\"}} {:.3}", load(&reactor.busy_permille) as f64 / 1000.0);
    let _ = writeln!(out, "skein_reactor_runtime_us_total{{shard=\"{id}\"}} {}", load(&reactor.runtime_us));
    let _ = writeln!(out, "skein_reactor_tasks_total{{shard=\"{id}\"}} {}", load(&reactor.tasks));
    let _ = writeln!(out, "skein_ring_reads_total{{shard=\"{id}\"}} {}", load(&reactor.ring_reads));
    let _ = writeln!(out, "skein_ring_read_bytes_total{{shard=\"{id}\"}} {}", load(&reactor.ring_read_bytes));
    let _ = writeln!(out, "skein_ring_writes_total{{shard=\"{id}\"}} {}", load(&reactor.ring_writes));
    let _ = writeln!(out, "skein_ring_written_bytes_total{{shard=\"{id}\"}} {}", load(&reactor.ring_written_bytes));
    // The appenders' write shape (`skein iotune`'s profile, or the defaults).
    let shape = shard.settings.write_shape;
    let _ = writeln!(out, "skein_append_chunk_bytes{{shard=\"{id}\"}} {}", shape.chunk_bytes);
    let _ = writeln!(out, "skein_append_writes_in_flight_max{{shard=\"{id}\"}} {}", shape.writes_in_flight);
    let _ = writeln!(out, "skein_ring_sq_depth{{shard=\"{id}\"}} {}", load(&reactor.ring_sq_depth));
    let _ = writeln!(out, "skein_ring_cq_depth{{shard=\"{id}\"}} {}", load(&reactor.ring_cq_depth));
    for (name, values) in [
        ("skein_ring_read_submit_wait_us", &reactor.ring_read_submit_wait_us),
        ("skein_ring_read_device_us", &reactor.ring_read_device_us),
        ("skein_ring_read_complete_wait_us", &reactor.ring_read_complete_wait_us),
        ("skein_task_queue_latency_us", &reactor.task_queue_latency_us),
    ] {
        for (value, quantile) in values.iter().zip(crate::reactor::IO_QUANTILES) {
            let _ = writeln!(out, "{name}{{shard=\"{id}\",quantile=\"{quantile}\"}} {}", load(value));
        }
    }
    let _ = writeln!(out, "skein_bytes_in_total{{shard=\"{id}\"}} {}", m.bytes_in.get());
    let _ = writeln!(out, "skein_bytes_out_total{{shard=\"{id}\"}} {}", m.bytes_out.get());
    let _ = writeln!(out, "skein_cross_shard_messages_total{{shard=\"{id}\"}} {}", m.cross_shard_messages.get());
    let client_hops = m.cross_shard_client_messages.get();
    let _ = writeln!(out, "skein_cross_shard_client_messages_total{{shard=\"{id}\"}} {client_hops}");
    let _ = writeln!(out, "skein_cross_shard_queued{{shard=\"{id}\"}} {}", shard.cross_shard_queued(id));
    render_histogram(&mut out, "skein_cross_shard_wait_us", &format!("shard=\"{id}\""), &m.cross_shard_wait);
    let _ = writeln!(out, "skein_connections{{shard=\"{id}\"}} {}", m.connections.get());
    let _ = writeln!(out, "skein_connections_refused_total{{shard=\"{id}\"}} {}", m.connections_refused.get());
    let _ = writeln!(out, "skein_sasl_authentications_total{{shard=\"{id}\"}} {}", m.sasl_authentications.get());
    let _ = writeln!(
        out,
        "skein_sasl_authentication_failures_total{{shard=\"{id}\"}} {}",
        m.sasl_authentication_failures.get()
    );
    let _ = writeln!(out, "skein_tls_handshake_failures_total{{shard=\"{id}\"}} {}", m.tls_handshake_failures.get());
    let _ =
        writeln!(out, "skein_unauthenticated_requests_total{{shard=\"{id}\"}} {}", m.unauthenticated_requests.get());
    let _ = writeln!(out, "skein_authorization_denials_total{{shard=\"{id}\"}} {}", m.authorization_denials.get());
    let _ =
        writeln!(out, "skein_quota_throttled_responses_total{{shard=\"{id}\"}} {}", m.quota_throttled_responses.get());
    let _ = writeln!(out, "skein_quota_throttle_ms_total{{shard=\"{id}\"}} {}", m.quota_throttle_ms.get());
    let _ = writeln!(out, "skein_connections_throttled_total{{shard=\"{id}\"}} {}", m.connections_throttled.get());
    let _ = writeln!(
        out,
        "skein_fetch_partitions_requested_total{{shard=\"{id}\"}} {}",
        m.fetch_partitions_requested.get()
    );
    let _ = writeln!(out, "skein_fetch_partition_reads_total{{shard=\"{id}\"}} {}", m.fetch_partition_reads.get());
    let _ = writeln!(out, "skein_fetch_waits_parked{{shard=\"{id}\"}} {}", m.fetch_waits_parked.get());
    let _ = writeln!(out, "skein_group_load_failures_total{{shard=\"{id}\"}} {}", m.group_load_failures.get());
    let _ = writeln!(out, "skein_fetch_sessions{{shard=\"{id}\"}} {}", shard.clients.fetch_sessions.borrow().len());
    let shares = &m.shares;
    let _ = writeln!(out, "skein_share_sessions{{shard=\"{id}\"}} {}", shard.clients.share_sessions.borrow().len());
    let _ = writeln!(out, "skein_share_acquired_records_total{{shard=\"{id}\"}} {}", shares.acquired.get());
    let _ = writeln!(out, "skein_share_acknowledged_records_total{{shard=\"{id}\"}} {}", shares.acknowledged.get());
    let _ = writeln!(out, "skein_share_lock_expired_records_total{{shard=\"{id}\"}} {}", shares.expired.get());
    let _ =
        writeln!(out, "skein_share_state_write_failures_total{{shard=\"{id}\"}} {}", shares.state_write_failures.get());
    let _ = writeln!(out, "skein_share_dead_letter_records_total{{shard=\"{id}\"}} {}", shares.dead_letters.get());
    let _ =
        writeln!(out, "skein_share_dead_letter_failures_total{{shard=\"{id}\"}} {}", shares.dead_letter_failures.get());
    let _ = writeln!(out, "skein_share_states{{shard=\"{id}\"}} {}", shard.coordinators.shares.len());
    let _ = writeln!(out, "skein_response_bytes_held{{shard=\"{id}\"}} {}", shard.responses.held());
    let _ = writeln!(out, "skein_fetch_budget_waits_total{{shard=\"{id}\"}} {}", shard.responses.waits());
    let _ = writeln!(out, "skein_request_bytes_buffered{{shard=\"{id}\"}} {}", shard.buffered_bytes.get());
    let _ = writeln!(out, "skein_partitions{{shard=\"{id}\"}} {}", shard.hosted_count());
    let gauges = shard.replication_gauges();
    let _ = writeln!(out, "skein_under_replicated_partitions{{shard=\"{id}\"}} {}", gauges.under_replicated);
    let _ = writeln!(out, "skein_high_watermark_lag_records{{shard=\"{id}\"}} {}", gauges.high_watermark_lag);
    let _ = writeln!(out, "skein_follower_lag_records{{shard=\"{id}\"}} {}", gauges.follower_lag);
    let _ = writeln!(out, "skein_follower_lag_ms{{shard=\"{id}\"}} {}", gauges.follower_lag_ms);
    let _ = writeln!(out, "skein_isr_shrinks_total{{shard=\"{id}\"}} {}", m.isr_shrinks.get());
    let _ = writeln!(out, "skein_isr_expands_total{{shard=\"{id}\"}} {}", m.isr_expands.get());
    let _ = writeln!(out, "skein_partition_assignments_total{{shard=\"{id}\"}} {}", m.assignments.get());
    render_consumer_lag(&mut out, shard);
    render_client_telemetry(&mut out, shard);
    if let Some(controller) = shard.controller() {
        let _ = writeln!(out, "skein_controller_active{{shard=\"{id}\"}} {}", u8::from(controller.is_leader()));
        let _ = writeln!(out, "skein_controller_applied_index{{shard=\"{id}\"}} {}", controller.applied_index());
    }
    let engine = shard.logs.metrics();
    let cache = shard.logs.cache().borrow();
    let _ = writeln!(out, "skein_batch_cache_hits_total{{shard=\"{id}\"}} {}", cache.hits);
    let _ = writeln!(out, "skein_batch_cache_misses_total{{shard=\"{id}\"}} {}", cache.misses);
    let _ = writeln!(out, "skein_batch_cache_bytes{{shard=\"{id}\"}} {}", cache.used_bytes());
    let _ = writeln!(out, "skein_io_writes_in_flight{{shard=\"{id}\"}} {}", engine.writes_in_flight.get());
    let _ = writeln!(out, "skein_io_writes_total{{shard=\"{id}\"}} {}", engine.writes.get());
    let _ = writeln!(out, "skein_io_syncs_total{{shard=\"{id}\"}} {}", engine.syncs.get());
    let _ = writeln!(out, "skein_group_commit_windows_total{{shard=\"{id}\"}} {}", engine.coalescing_windows.get());
    let _ = writeln!(out, "skein_read_ahead_bytes_total{{shard=\"{id}\"}} {}", engine.read_ahead_bytes.get());
    let _ = writeln!(out, "skein_appended_bytes_total{{shard=\"{id}\"}} {}", engine.appended_bytes.get());
    let _ = writeln!(out, "skein_disk_read_bytes_total{{shard=\"{id}\"}} {}", engine.disk_read_bytes.get());
    // User-space copies of record bytes (with the produce request prefixes read ahead
    // past the fields before any records), against skein_appended_bytes_total
    // (produce) and skein_bytes_out_total (fetch).
    let copied_produce = engine.append_copied_bytes.get() + m.produce_copied_bytes.get();
    let copied_fetch = engine.read_copied_bytes.get() + m.fetch_copied_bytes.get();
    let _ = writeln!(out, "skein_copied_bytes_total{{shard=\"{id}\",path=\"produce\"}} {copied_produce}");
    let _ = writeln!(out, "skein_copied_bytes_total{{shard=\"{id}\",path=\"fetch\"}} {copied_fetch}");
    let _ = writeln!(out, "skein_corruptions_total{{shard=\"{id}\"}} {}", engine.corruptions.get());
    let _ = writeln!(out, "skein_scrub_bytes_total{{shard=\"{id}\"}} {}", engine.scrubbed_bytes.get());
    let _ = writeln!(out, "skein_scrub_corrupt_batches_total{{shard=\"{id}\"}} {}", engine.scrub_corrupt_batches.get());
    let _ = writeln!(out, "skein_scrub_passes_total{{shard=\"{id}\"}} {}", engine.scrub_passes.get());
    let _ = writeln!(out, "skein_cleaner_passes_total{{shard=\"{id}\"}} {}", engine.cleaner_passes.get());
    let _ = writeln!(
        out,
        "skein_compacted_bytes_reclaimed_total{{shard=\"{id}\"}} {}",
        engine.compacted_bytes_reclaimed.get()
    );
    let _ = writeln!(out, "skein_recovery_zero_tails_total{{shard=\"{id}\"}} {}", engine.recovery_zero_tails.get());
    // 1 while appends are refused for want of space (KAFKA_STORAGE_ERROR), the same
    // on every shard of the node; the refusals counted per shard.
    for dir in shard.logs.log_dirs().dirs() {
        let _ = writeln!(
            out,
            "skein_log_dir_full{{shard=\"{id}\",dir=\"{}\"}} {}",
            dir.path().display(),
            u8::from(dir.space.is_full())
        );
        // 1 once a write or sync in it failed: its partitions are offline.
        let _ = writeln!(
            out,
            "skein_log_dir_failed{{shard=\"{id}\",dir=\"{}\"}} {}",
            dir.path().display(),
            u8::from(dir.space.is_failed())
        );
    }
    let _ = writeln!(out, "skein_disk_full_refusals_total{{shard=\"{id}\"}} {}", engine.disk_full_refusals.get());
    // This thread's files: open against the budget, closed while idle to stay within
    // it and opened again on their next use, and opens past it (every file in use).
    let files = skein_engine::io::open_files::stats();
    let _ = writeln!(out, "skein_open_files{{shard=\"{id}\"}} {}", files.open);
    let _ = writeln!(out, "skein_open_files_budget{{shard=\"{id}\"}} {}", files.budget);
    let _ = writeln!(out, "skein_open_files_closed_total{{shard=\"{id}\"}} {}", files.closed);
    let _ = writeln!(out, "skein_open_files_reopened_total{{shard=\"{id}\"}} {}", files.reopened);
    let _ = writeln!(out, "skein_open_files_over_budget_total{{shard=\"{id}\"}} {}", files.over_budget);
    let _ = writeln!(
        out,
        "skein_recovery_zero_tail_bytes_total{{shard=\"{id}\"}} {}",
        engine.recovery_zero_tail_bytes.get()
    );
    for (api, stages) in [("produce", &m.produce_stages), ("fetch", &m.fetch_stages)] {
        for (stage, histogram) in stages.named() {
            render_stage(&mut out, id, api, stage, histogram);
        }
    }
    for (stage, histogram) in [
        ("gate_wait", &engine.gate_wait),
        ("write", &engine.write_latency),
        ("sync", &engine.sync_latency),
        ("roll", &engine.roll_latency),
        ("seal", &engine.seal_latency),
    ] {
        render_stage(&mut out, id, "append", stage, histogram);
    }
    out
}

/// The consumer lag of the groups this shard coordinates (`skein_coordinator::group::lag`):
/// per partition and per group, without a shard label (a group's series stay the same
/// when its coordinator moves), then this shard's series left out and partitions it
/// cannot measure. The series' text is rendered once per change of the table and
/// kept: a table near its cap is megabytes of text, and scrapes come often.
fn render_consumer_lag(out: &mut String, shard: &Shard) {
    use std::fmt::Write;
    thread_local! {
        /// (generation rendered, its text), for this thread's shard.
        static RENDERED: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
    }
    let lag = shard.coordinators.consumer_lag.borrow();
    RENDERED.with_borrow_mut(|(generation, text)| {
        if *generation != lag.generation {
            *text = render_lag_series(&lag);
            *generation = lag.generation;
        }
        out.push_str(text);
    });
    let id = shard.id;
    let _ = writeln!(out, "skein_consumer_group_lag_series_dropped{{shard=\"{id}\"}} {}", lag.dropped_series);
    let _ = writeln!(out, "skein_consumer_group_lag_partitions_unknown{{shard=\"{id}\"}} {}", lag.unknown_partitions);
}

/// The metrics clients pushed to this shard (KIP-714, `skein_net::telemetry`):
/// `skein_client_metric{client_id,client_instance_id,client_software,metric,...}`
/// with the point's attributes as further labels, then the shard's telemetry counters.
/// Without a shard label: a client's series stay the same when it moves.
fn render_client_telemetry(out: &mut String, shard: &Shard) {
    use std::fmt::Write;
    let mut telemetry = shard.clients.telemetry.borrow_mut();
    telemetry.expire(std::time::Instant::now());
    for ((client_id, instance), client) in telemetry.series.clients() {
        let instance = skein_net::telemetry::uuid_text(*instance);
        let prefix = format!(
            "skein_client_metric{{client_id=\"{}\",client_instance_id=\"{instance}\",client_software=\"{}\"",
            escape_label(client_id),
            escape_label(&client.software)
        );
        for ((metric, attributes), value) in &client.series {
            out.push_str(&prefix);
            let _ = write!(out, ",metric=\"{}\"", escape_label(metric));
            // A label once: ours first, then each attribute's first spelling (a client
            // that sends `a.b` and `a_b` must not make the whole page unreadable).
            let mut named: Vec<String> = Vec::new();
            for (key, value) in attributes {
                let key = label_name(key);
                let ours = matches!(key.as_str(), "client_id" | "client_instance_id" | "client_software" | "metric");
                if ours || named.contains(&key) {
                    continue;
                }
                let _ = write!(out, ",{key}=\"{}\"", escape_label(value));
                named.push(key);
            }
            let _ = writeln!(out, "}} {}", sample_value(*value));
        }
    }
    let id = shard.id;
    let m = telemetry.metrics;
    let _ = writeln!(out, "skein_client_telemetry_instances{{shard=\"{id}\"}} {}", telemetry.instances());
    let _ = writeln!(out, "skein_client_telemetry_series{{shard=\"{id}\"}} {}", telemetry.series.len());
    let _ = writeln!(out, "skein_client_telemetry_series_dropped_total{{shard=\"{id}\"}} {}", telemetry.series.dropped);
    let _ = writeln!(
        out,
        "skein_client_telemetry_subscription_requests_total{{shard=\"{id}\"}} {}",
        m.subscription_requests
    );
    let _ = writeln!(out, "skein_client_telemetry_pushes_total{{shard=\"{id}\"}} {}", m.pushes);
    let _ = writeln!(out, "skein_client_telemetry_throttled_total{{shard=\"{id}\"}} {}", m.throttled);
    let _ = writeln!(
        out,
        "skein_client_telemetry_unknown_subscriptions_total{{shard=\"{id}\"}} {}",
        m.unknown_subscriptions
    );
    let _ = writeln!(out, "skein_client_telemetry_invalid_pushes_total{{shard=\"{id}\"}} {}", m.invalid_pushes);
    let _ = writeln!(out, "skein_client_telemetry_evicted_total{{shard=\"{id}\"}} {}", m.evicted);
}

/// A sample's value as Prometheus reads it (`+Inf`, not Rust's `inf`).
fn sample_value(value: f64) -> String {
    match value {
        v if v.is_nan() => "NaN".into(),
        v if v == f64::INFINITY => "+Inf".into(),
        v if v == f64::NEG_INFINITY => "-Inf".into(),
        v => v.to_string(),
    }
}

/// A Prometheus label name for an attribute: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn label_name(key: &str) -> String {
    let mut name: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || name.starts_with("__") {
        name.insert_str(0, "a_");
    }
    name
}

/// `skein_consumer_group_lag_records{group,topic,partition}` and
/// `skein_consumer_group_lag_sum_records{group}`.
fn render_lag_series(lag: &skein_coordinator::group::lag::ConsumerLag) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for group in &lag.groups {
        let name = escape_label(&group.group);
        for p in &group.partitions {
            let topic = escape_label(&p.topic);
            let _ = writeln!(
                out,
                "skein_consumer_group_lag_records{{group=\"{name}\",topic=\"{topic}\",partition=\"{}\"}} {}",
                p.partition, p.records
            );
        }
        let _ = writeln!(out, "skein_consumer_group_lag_sum_records{{group=\"{name}\"}} {}", group.sum_records());
    }
    out
}

/// A label value in Prometheus' text format: backslash, double quote and line feed
/// escaped.
fn escape_label(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(value);
    }
    let mut escaped = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// One stage histogram as `skein_stage_latency_us` (Prometheus, cumulative buckets).
fn render_stage(
    out: &mut String,
    id: usize,
    api: &str,
    stage: &str,
    histogram: &skein_engine::metrics::StageHistogram,
) {
    let labels = format!("shard=\"{id}\",api=\"{api}\",stage=\"{stage}\"");
    render_histogram(out, "skein_stage_latency_us", &labels, histogram);
}

/// A stage histogram as Prometheus cumulative buckets named `name`.
fn render_histogram(out: &mut String, name: &str, labels: &str, histogram: &skein_engine::metrics::StageHistogram) {
    use std::fmt::Write;
    let buckets = histogram.buckets();
    let mut cumulative = 0;
    for (i, bound) in skein_engine::metrics::STAGE_BUCKETS_US.iter().enumerate() {
        cumulative += buckets[i];
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    cumulative += buckets[buckets.len() - 1];
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", histogram.sum_us());
    let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
}

/// Serves admin requests until the listener fails.
///
/// # Errors
/// A message when the address cannot be bound.
pub async fn serve(shard: Rc<Shard>, address: SocketAddr) -> Result<(), String> {
    let listener = glommio::net::TcpListener::bind(address).map_err(|e| format!("cannot listen on {address}: {e}"))?;
    tracing::info!(target: "skein", %address, "admin endpoint");
    loop {
        let Ok(mut stream) = listener.accept().await else { continue };
        let shard = shard.clone();
        glommio::spawn_local(async move {
            let mut buf = vec![0u8; 8192];
            let mut len = 0;
            let route = loop {
                let Ok(n) = stream.read(&mut buf[len..]).await else { return };
                if n == 0 {
                    return;
                }
                len += n;
                match head(&buf[..len]) {
                    Head::Complete(method, target) => break Route::parse(&method, &target),
                    Head::Partial if len < buf.len() => continue,
                    _ => return,
                }
            };
            let (status, content_type, body) = match route {
                Ok(route) => respond(&shard, route).await,
                Err(refused) => refused,
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.close().await;
        })
        .detach();
    }
}

/// What the endpoint answers: a status line, a content type and a body.
pub type Answer = (&'static str, &'static str, String);

/// A request head as far as it arrived.
pub enum Head {
    /// Whole: its method and target.
    Complete(String, String),
    /// More bytes are needed.
    Partial,
    /// Not HTTP/1: the connection is closed.
    Invalid,
}

/// Parses a request head (`httparse`, at most 32 headers).
pub fn head(bytes: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {
            Head::Complete(request.method.unwrap_or("").to_string(), request.path.unwrap_or("").to_string())
        }
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::Invalid,
    }
}

/// An admin request, parsed and checked before anything is done for it.
#[derive(Debug, PartialEq)]
pub enum Route {
    Metrics,
    Health,
    Placement,
    Shards,
    /// Moves a partition to a shard.
    Move {
        topic: String,
        partition: i32,
        shard: usize,
    },
    /// Measures the load for `interval` and plans moves within `band`; with `apply`,
    /// makes them.
    Balance {
        interval: std::time::Duration,
        band: f64,
        apply: bool,
    },
}

impl Route {
    /// The route of `method` and `target` (path and query).
    ///
    /// # Errors
    /// The answer to a request that names no route or bad parameters.
    pub fn parse(method: &str, target: &str) -> Result<Route, Answer> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let param =
            |name: &str| query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')).map(str::to_string);
        let bad = |message: &str| Err(("400 Bad Request", "text/plain", format!("{message}\n")));
        Ok(match (method, path) {
            ("GET", "/metrics") => Route::Metrics,
            ("GET", "/v1/health") => Route::Health,
            ("GET", "/v1/placement") => Route::Placement,
            ("GET", "/v1/shards") => Route::Shards,
            ("POST", "/v1/placement/move") => {
                let (Some(topic), Some(partition), Some(shard)) = (param("topic"), param("partition"), param("shard"))
                else {
                    return bad("need topic, partition and shard");
                };
                let (Ok(partition), Ok(shard)) = (partition.parse::<i32>(), shard.parse::<usize>()) else {
                    return bad("partition and shard must be numbers");
                };
                Route::Move { topic, partition, shard }
            }
            (method @ ("GET" | "POST"), "/v1/placement/balance") => {
                let interval = param("interval_ms").map_or(Ok(2000), |v| v.parse::<u64>());
                let band = param("band").map_or(Ok(crate::balance::BALANCE_BAND), |v| v.parse::<f64>());
                let (Ok(interval), Ok(band)) = (interval, band) else {
                    return bad("interval_ms and band must be numbers");
                };
                if !(100..=60_000).contains(&interval) || !(0.0..=1.0).contains(&band) {
                    return bad("interval_ms from 100 to 60000, band from 0 to 1");
                }
                let interval = std::time::Duration::from_millis(interval);
                Route::Balance { interval, band, apply: method == "POST" }
            }
            ("GET", _) | ("POST", _) => return Err(("404 Not Found", "text/plain", "not found\n".into())),
            _ => return Err(("405 Method Not Allowed", "text/plain", "GET or POST\n".into())),
        })
    }
}

async fn respond(shard: &Rc<Shard>, route: Route) -> Answer {
    match route {
        Route::Metrics => ("200 OK", "text/plain; version=0.0.4", fresh_board(shard, shard.settings.shards).await),
        Route::Health => ("200 OK", "application/json", "{\"status\":\"ok\"}\n".into()),
        Route::Placement => ("200 OK", "application/json", placement(shard).await),
        Route::Shards => ("200 OK", "application/json", shards(shard)),
        Route::Move { topic, partition, shard: target } => {
            let tp = skein_engine::TopicPartition::new(topic, partition);
            match skein_net::topics::move_partition(shard, &tp, target).await {
                Ok(()) => ("200 OK", "application/json", format!("{{\"moved\":\"{tp}\",\"shard\":{target}}}\n")),
                Err((code, message)) => {
                    ("409 Conflict", "text/plain", format!("cannot move {tp}: {message} (error {code})\n"))
                }
            }
        }
        Route::Balance { interval, band, apply } => {
            let measured = crate::balance::measure(shard, interval).await;
            let plan = crate::balance::plan(
                &measured.shards_busy,
                &measured.partitions,
                band,
                crate::balance::BALANCE_GAIN_MIN,
                crate::balance::BALANCE_MOVES_MAX,
            );
            let outcomes = match apply {
                true => Some(crate::balance::apply(shard, &plan).await),
                false => None,
            };
            let body = crate::balance::to_json(&measured, &plan, outcomes.as_deref());
            ("200 OK", "application/json", serde_json::to_string_pretty(&body).unwrap_or_default())
        }
    }
}

/// Each shard's reactor figures (`reactor::Health`): busy fraction of the last
/// interval, stalls, cumulative runtime, tasks and ring I/O, task queue latency, and
/// its cross-shard queue (depth now, wait p99 over the last window).
fn shards(shard: &Rc<Shard>) -> String {
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    let rows: Vec<serde_json::Value> = (0..shard.settings.shards)
        .map(|id| {
            let health = crate::reactor::health(id);
            serde_json::json!({
                "shard": id,
                "busy_ratio": load(&health.busy_permille) as f64 / 1000.0,
                "stalls": load(&health.stalls),
                "runtime_us": load(&health.runtime_us),
                "tasks": load(&health.tasks),
                "ring_reads": load(&health.ring_reads),
                "ring_writes": load(&health.ring_writes),
                "ring_read_device_us_p99": load(&health.ring_read_device_us[1]),
                "task_queue_latency_us_p99": load(&health.task_queue_latency_us[1]),
                "cross_shard_queued": shard.cross_shard_queued(id),
                "ring_sq_depth": load(&health.ring_sq_depth),
                "ring_cq_depth": load(&health.ring_cq_depth),
                "cross_shard_wait_us_p99": load(&health.cross_shard_wait_us_p99),
            })
        })
        .collect();
    serde_json::to_string_pretty(&rows).unwrap_or_default()
}

/// Partition -> shard, with each partition's cumulative bytes in and out.
async fn placement(shard: &Rc<Shard>) -> String {
    let image = shard.image();
    let mut rows = Vec::new();
    for topic in image.topics.values() {
        for (p, owner) in topic.shards.iter().enumerate() {
            let tp = skein_engine::TopicPartition::new(topic.name.clone(), p as i32);
            let stats = shard.call_on(*owner, tp, skein_net::shard::ops::Stats).await;
            let (bytes_in, bytes_out, size) = match stats {
                Ok(stats) => (stats.bytes_in, stats.bytes_out, stats.size_bytes),
                Err(_) => (0, 0, 0),
            };
            rows.push(serde_json::json!({
                "topic": topic.name, "partition": p, "shard": owner,
                "bytes_in": bytes_in, "bytes_out": bytes_out, "size_bytes": size,
            }));
        }
    }
    serde_json::to_string_pretty(&rows).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_coordinator::group::lag::{admit, ConsumerLag, GroupOffsets};

    // Requests are parsed into routes before anything runs; bad ones get their answer.
    #[test]
    fn routes_parse_and_refuse() {
        let head = |text: &str| match super::head(text.as_bytes()) {
            Head::Complete(method, target) => Some((method, target)),
            _ => None,
        };
        let (method, target) = head("POST /v1/placement/move?topic=t&partition=2&shard=1 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(Route::parse(&method, &target), Ok(Route::Move { topic: "t".into(), partition: 2, shard: 1 }));
        assert!(matches!(super::head(b"GET /metrics HTTP/1.1\r\n"), Head::Partial));
        assert!(matches!(super::head(b"\x00\x01 junk\r\n\r\n"), Head::Invalid));
        let status = |method: &str, target: &str| Route::parse(method, target).unwrap_err().0;
        assert_eq!(status("POST", "/v1/placement/move?topic=t&partition=x&shard=1"), "400 Bad Request");
        assert_eq!(status("GET", "/v1/placement/balance?interval_ms=5"), "400 Bad Request");
        assert_eq!(status("GET", "/v1/nothing"), "404 Not Found");
        assert_eq!(status("DELETE", "/metrics"), "405 Method Not Allowed");
        let balance = Route::parse("POST", "/v1/placement/balance?interval_ms=500&band=0.2").unwrap();
        let interval = std::time::Duration::from_millis(500);
        assert_eq!(balance, Route::Balance { interval, band: 0.2, apply: true });
    }

    // Label values escape backslashes, quotes and line feeds, and nothing else.
    #[test]
    fn label_values_are_escaped() {
        for (value, expected) in [
            ("plain-group.1", "plain-group.1"),
            ("a\"b", "a\\\"b"),
            ("a\\b", "a\\\\b"),
            ("line\nbreak", "line\\nbreak"),
            ("\\\"\n", "\\\\\\\"\\n"),
            ("ünïcode", "ünïcode"),
        ] {
            assert_eq!(escape_label(value), expected, "{value:?}");
        }
    }

    // The lag table renders one series per partition and a sum per group, labels
    // escaped.
    #[test]
    fn lag_series_render() {
        let offsets = |entries: &[(&str, i32, i64)]| -> GroupOffsets {
            entries.iter().map(|&(t, p, o)| ((t.to_string(), p), o)).collect()
        };
        let committed = [
            ("readers".to_string(), offsets(&[("t", 0, 20), ("t", 1, 40)])),
            ("odd \"group\"\n".to_string(), offsets(&[("t", 0, 60)])),
        ]
        .into_iter()
        .collect();
        let lag = ConsumerLag::compute(admit(committed, 100), |_, _| Some(50), 1);
        let text = render_lag_series(&lag);
        assert_eq!(
            text,
            "skein_consumer_group_lag_records{group=\"odd \\\"group\\\"\\n\",topic=\"t\",partition=\"0\"} 0\n\
             skein_consumer_group_lag_sum_records{group=\"odd \\\"group\\\"\\n\"} 0\n\
             skein_consumer_group_lag_records{group=\"readers\",topic=\"t\",partition=\"0\"} 30\n\
             skein_consumer_group_lag_records{group=\"readers\",topic=\"t\",partition=\"1\"} 10\n\
             skein_consumer_group_lag_sum_records{group=\"readers\"} 40\n"
        );
    }
}
