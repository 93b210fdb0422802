//! The Grafana dashboard (`deploy/grafana/skein.json`) reads only metrics Skein
//! serves: every PromQL expression's metric names appear in a live `/metrics` scrape
//! after a little traffic (a produce, a consume, a group commit, a fetch error).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{create_topic, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const DASHBOARD: &str = include_str!("../deploy/grafana/skein.json");

/// Words of PromQL that are not metric names where they stand alone: binary and set
/// operators, modifiers, literals. Functions and aggregations are told apart by the
/// `(` after them; the label lists after `by`, `without`, `on`, `ignoring`,
/// `group_left` and `group_right` are skipped whole.
const KEYWORDS: [&str; 8] = ["and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"];
const LABEL_LIST_BEFORE: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The index just past the group opened at `chars[start]` (a `{`, `[` or `(`),
/// nested groups and quoted strings inside it skipped.
fn skip_group(chars: &[char], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// The index just past the string quoted at `chars[start]`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' && quote != '`' { 2 } else { 1 };
    }
    i + 1
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a PromQL expression (or a Grafana `label_values(...)` variable
/// query) reads: identifiers outside label matchers, ranges and strings that are
/// neither functions (followed by `(`), keywords, labels of a `by (...)` list,
/// numbers, durations nor Grafana variables (`$instance`, `${...}`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' | '[' => i = skip_group(&chars, i),
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_group(&chars, i);
                } else {
                    while i < chars.len() && is_word(chars[i]) {
                        i += 1;
                    }
                }
            }
            // Numbers and durations: 0.99, 1e3, 5m.
            c if c.is_ascii_digit() || c == '.' => {
                while i < chars.len() && (is_word(chars[i]) || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && is_word(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                // A call, or an aggregation with its grouping first: `sum by (a) (x)`.
                let word_next: String = chars[next..].iter().take_while(|&&c| is_word(c)).collect();
                let call = chars.get(next) == Some(&'(') || matches!(word_next.as_str(), "by" | "without");
                if LABEL_LIST_BEFORE.contains(&word.as_str()) {
                    if call {
                        i = skip_group(&chars, next);
                    }
                } else if word == "label_values" && call {
                    // Grafana's label_values([metric-or-selector, ]label): the label
                    // is the last argument.
                    let end = skip_group(&chars, next);
                    let inner: String = chars[next + 1..end - 1].iter().collect();
                    if let Some((selector, _label)) = inner.rsplit_once(',') {
                        names.extend(metric_names(selector));
                    }
                    i = end;
                } else if !call && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every query in a dashboard: panels' (and rows' panels') targets, and the
/// template variables' queries.
fn queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query", serde_json::Value::String(query)) => out.push(query.clone()),
                    _ => queries(value, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| queries(item, out)),
        _ => {}
    }
}

/// The series names in a Prometheus text scrape (histograms as their `_bucket`,
/// `_sum` and `_count` series: the names PromQL reads).
fn scraped_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The metric names the dashboard's queries read that the scrape lacks, with the
/// query naming each.
fn missing(dashboard: &serde_json::Value, scraped: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut all = Vec::new();
    queries(dashboard, &mut all);
    let mut missing = Vec::new();
    for query in all {
        for name in metric_names(&query) {
            if !scraped.contains(&name) {
                missing.push((name, query.clone()));
            }
        }
    }
    missing
}

fn check(expr: &str, expected: &[&str]) {
    let names = metric_names(expr);
    let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
    assert_eq!(names, expected, "{expr}");
}

// The extractor finds metric names and nothing else: not functions, aggregations,
// label names in matchers or `by` lists, numbers, durations, Grafana variables.
#[test]
fn extractor_finds_metric_names() {
    check(
        r#"sum by (instance, shard) (rate(skein_requests_total{instance=~"$instance",api_key="0"}[$__rate_interval]))"#,
        &["skein_requests_total"],
    );
    check(
        "histogram_quantile(0.99, sum by (le, shard) (rate(skein_request_latency_us_bucket[5m])))",
        &["skein_request_latency_us_bucket"],
    );
    check("sum(rate(a_total[1m])) by (le) / (b + c) * 100", &["a_total", "b", "c"]);
    check("x and on (shard) y unless ignoring(le) z or group_left (a) w", &["x", "y", "z", "w"]);
    check("rate(x[5m] offset 1h) > bool 0.5e3", &["x"]);
    check(r#"topk(5, skein_x{group="a}b\"c", topic!~'t{1}'})"#, &["skein_x"]);
    check(r#"sum without (le) (skein_y{a="1"}) + on() vector(1) + ${__interval_ms}"#, &["skein_y"]);
    check("label_values(skein_partitions, instance)", &["skein_partitions"]);
    check(r#"label_values(skein_lag{instance=~"$instance"}, group)"#, &["skein_lag"]);
    check("label_values(instance)", &[]);
    check("NaN + Inf", &[]);
}

// A dashboard query that names a metric the scrape lacks is reported, with its query;
// one whose names all appear is not.
#[test]
fn a_bogus_metric_fails_the_check() {
    let scraped = scraped_names(
        "skein_requests_total{shard=\"0\",api_key=\"0\"} 3\n\
         skein_request_latency_us_bucket{shard=\"0\",api_key=\"0\",le=\"+Inf\"} 3\n\
         skein_request_latency_us_sum{shard=\"0\",api_key=\"0\"} 30\n",
    );
    let good = serde_json::json!({"panels": [{"targets": [
        {"expr": "rate(skein_requests_total[1m])"},
        {"expr": "histogram_quantile(0.99, rate(skein_request_latency_us_bucket[1m]))"},
    ]}]});
    assert_eq!(missing(&good, &scraped), vec![]);
    let bogus = serde_json::json!({"panels": [{"type": "row", "panels": [{"targets": [
        {"expr": "rate(skein_requests_total[1m]) + rate(skein_no_such_metric_total[1m])"},
    ]}]}], "templating": {"list": [{"query": {"query": "label_values(skein_request_latency_us, shard)"}}]}});
    let found: Vec<String> = missing(&bogus, &scraped).into_iter().map(|(name, _)| name).collect();
    // A histogram's base name is not a series PromQL can read.
    assert_eq!(found, ["skein_no_such_metric_total", "skein_request_latency_us"]);
}

/// A client-metrics subscription (KIP-714) for every client and metric, pushed each
/// second: the clients' own series then come to /metrics.
fn subscribe_clients(broker: &Broker) {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    use kafka_protocol::protocol::StrBytes;
    let set = |k: &'static str, v: &'static str| {
        AlterableConfig::default()
            .with_name(StrBytes::from_static_str(k))
            .with_value(Some(StrBytes::from_static_str(v)))
    };
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(16)
        .with_resource_name(StrBytes::from_static_str("everything"))
        .with_configs(vec![set("metrics", "org.apache.kafka."), set("interval.ms", "1000")])]);
    let response = common::RawClient::connect(&broker.bootstrap()).call(&request, 1);
    assert_eq!(response.responses[0].error_code, 0, "{response:?}");
}

// Every metric the dashboard queries is in a live scrape of a broker that served a
// produce, a consume, a group commit (its lag series), a failed fetch and clients'
// telemetry pushes.
#[test]
fn dashboard_queries_only_served_metrics() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("skein.json is JSON");
    assert_eq!(dashboard["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let mut all = Vec::new();
    queries(&dashboard, &mut all);
    assert!(all.len() >= 30, "{} queries", all.len());

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "2", &[]);
    create_topic(&broker, "dash", 2);
    subscribe_clients(&broker);
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).create().unwrap();
    for i in 0..20 {
        producer.send(BaseRecord::<(), str>::to("dash").partition(i % 2).payload("x")).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "dashboard")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    // Partition 1 from past its end: the fetch fails (OFFSET_OUT_OF_RANGE, an error
    // counted in skein_request_errors_total) and the consumer resets to the earliest.
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset("dash", 0, Offset::Beginning).unwrap();
    assignment.add_partition_offset("dash", 1, Offset::Offset(1_000)).unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut read = 0;
    while read < 20 {
        assert!(Instant::now() < deadline, "read {read} of 20");
        if let Some(message) = consumer.poll(Duration::from_millis(50)) {
            message.unwrap();
            read += 1;
        }
    }
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset("dash", 0, Offset::Offset(5)).unwrap();
    commit.add_partition_offset("dash", 1, Offset::Offset(10)).unwrap();
    consumer.commit(&commit, CommitMode::Sync).unwrap();

    // The lag series come with the coordinator's next refresh.
    let deadline = Instant::now() + Duration::from_secs(20);
    let scrape = loop {
        let scrape = broker.metrics();
        if scrape.contains("skein_consumer_group_lag_records{group=\"dashboard\"")
            && scrape.contains("skein_request_errors_total{")
            && scrape.contains("skein_client_metric{")
        {
            break scrape;
        }
        assert!(Instant::now() < deadline, "no lag or error series yet:\n{scrape}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(scrape.contains("skein_consumer_group_lag_records{group=\"dashboard\",topic=\"dash\",partition=\"0\"} 5"));
    assert!(scrape.contains("skein_consumer_group_lag_sum_records{group=\"dashboard\"} 5"));
    let scraped = scraped_names(&scrape);
    let missing = missing(&dashboard, &scraped);
    assert!(missing.is_empty(), "the dashboard queries metrics /metrics lacks: {missing:#?}");
    let used: BTreeSet<String> = all.iter().flat_map(|q| metric_names(q)).collect();
    eprintln!("{} queries over {} metrics, all in the scrape", all.len(), used.len());
}
