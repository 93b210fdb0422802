//! Client telemetry (KIP-714) with the clients that push it by default: Kafka 4.4's
//! Java producer (kafka-producer-perf-test) and librdkafka (the rdkafka crate). A
//! CLIENT_METRICS subscription made with `kafka-client-metrics` selects what they
//! push; the pushed metrics appear in `/metrics` by client id. Then the wire rules,
//! with raw requests: a stale subscription id, a throttled push, a payload that is
//! not OTLP.

mod common;

use std::time::{Duration, Instant};

use common::{kafka_tool, Broker, RawClient};
use kafka_protocol::messages::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use prost::Message as _;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

const METRICS: &str = "org.apache.kafka.tools.ClientMetricsCommand";
const PERF: &str = "org.apache.kafka.tools.ProducerPerformance";
const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";

fn subscribe(b: &str, name: &str, metrics: &str, interval_ms: &str, matching: &[&str]) {
    let args = ["--bootstrap-server", b, "--alter", "--name", name, "--metrics", metrics, "--interval", interval_ms];
    let (ok, out) = kafka_tool(METRICS, &[&args[..], matching].concat(), "");
    assert!(ok, "{out}");
}

/// The `skein_client_metric` lines of `client_id`.
fn pushed(broker: &Broker, client_id: &str) -> Vec<String> {
    let prefix = format!("skein_client_metric{{client_id=\"{client_id}\",");
    broker.metrics().lines().filter(|l| l.starts_with(&prefix)).map(str::to_owned).collect()
}

fn wait_for_pushed(broker: &Broker, client_id: &str, metric: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines = pushed(broker, client_id);
        if lines.iter().any(|l| l.contains(&format!("metric=\"{metric}"))) {
            return lines;
        }
        assert!(Instant::now() < deadline, "{client_id} never pushed {metric}: {lines:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

// A Java 4.4 producer and a librdkafka producer, each left at its defaults, push the
// metrics a subscription names every second; /metrics shows them by client id with
// the client's software, and a producer's send rate and request latency among them.
#[test]
fn java_and_librdkafka_producers_push_their_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &[]);
    let b = broker.bootstrap();
    common::create_topic(&broker, "pushed", 1);
    subscribe(&b, "producers", "org.apache.kafka.producer.", "1000", &[]);
    subscribe(&b, "one-consumer", "org.apache.kafka.consumer.", "1000", &["--match", "client_id=java-consumer"]);

    let rd = std::thread::spawn({
        let b = b.clone();
        move || {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("client.id", "rd-producer")
                .set("linger.ms", "5")
                .create()
                .unwrap();
            let until = Instant::now() + Duration::from_secs(8);
            while Instant::now() < until {
                let _ = producer.send(BaseRecord::<(), str>::to("pushed").payload("x"));
                producer.poll(Duration::from_millis(20));
            }
            producer.flush(Duration::from_secs(10)).unwrap();
        }
    });
    let props = format!("bootstrap.servers={b}");
    let perf = [
        "--topic",
        "pushed",
        "--num-records",
        "6000",
        "--record-size",
        "100",
        "--throughput",
        "1000",
        "--producer-props",
        &props,
        "client.id=java-producer",
    ];
    let (ok, out) = kafka_tool(PERF, &perf, "");
    assert!(ok, "{out}");
    rd.join().unwrap();

    let java = wait_for_pushed(&broker, "java-producer", "org.apache.kafka.producer.record.send.rate");
    assert!(java.iter().all(|l| l.contains("client_software=\"apache-kafka-java/4.4.0\"")), "{java:#?}");
    assert!(java.iter().any(|l| l.contains("metric=\"org.apache.kafka.producer.request.latency.avg\"")), "{java:#?}");
    assert!(!java.iter().any(|l| l.contains("metric=\"org.apache.kafka.consumer.")), "only what was subscribed");
    let rd = wait_for_pushed(&broker, "rd-producer", "org.apache.kafka.producer.node.request.latency.avg");
    assert!(rd.iter().all(|l| l.contains("client_software=\"librdkafka/")), "{rd:#?}");
    // A Java consumer reads it all and idles: its lag and poll idle ratio arrive
    // (the last with its terminating push at close).
    let consume = [
        "--bootstrap-server",
        &b,
        "--topic",
        "pushed",
        "--from-beginning",
        "--timeout-ms",
        "4000",
        "--group",
        "pushed-readers",
        "--consumer-property",
        "client.id=java-consumer",
    ];
    let (ok, out) = kafka_tool(CONSOLE_CONSUMER, &consume, "");
    assert!(ok || out.contains("Processed a total of"), "{out}");
    let consumer = wait_for_pushed(&broker, "java-consumer", "org.apache.kafka.consumer.poll.idle.ratio.avg");
    let lag = "metric=\"org.apache.kafka.consumer.fetch.manager.records.lag.max\"";
    assert!(consumer.iter().any(|l| l.contains(lag)), "{consumer:#?}");
    assert!(!consumer.iter().any(|l| l.contains("metric=\"org.apache.kafka.producer.")), "{consumer:#?}");
    let metrics = broker.metrics();
    let count = |name: &str| -> u64 {
        metrics.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
    };
    assert!(count("skein_client_telemetry_pushes_total") >= 2, "{metrics}");
    assert_eq!(count("skein_client_telemetry_invalid_pushes_total"), 0);
}

fn get(client: &mut RawClient, id: uuid::Uuid) -> kafka_protocol::messages::GetTelemetrySubscriptionsResponse {
    client.call(&GetTelemetrySubscriptionsRequest::default().with_client_instance_id(id), 0)
}

fn push(client: &mut RawClient, id: uuid::Uuid, subscription: i32, metrics: Vec<u8>) -> i16 {
    let request = PushTelemetryRequest::default()
        .with_client_instance_id(id)
        .with_subscription_id(subscription)
        .with_compression_type(4)
        .with_metrics(metrics.into());
    client.call(&request, 0).error_code
}

// The wire rules, as Kafka 4.4's ClientMetricsManager applies them: a new instance id
// and the subscription; a push of zstd OTLP taken and shown; a second push within
// the interval THROTTLING_QUOTA_EXCEEDED (89); after the subscription changes, the
// old id UNKNOWN_SUBSCRIPTION_ID (117) and a new one given at once; bytes that are not
// OTLP INVALID_RECORD (87); a push past telemetry.max.bytes TELEMETRY_TOO_LARGE (118).
#[test]
fn raw_requests_follow_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), "1", &["--telemetry-max-bytes", "4096"]);
    let b = broker.bootstrap();
    subscribe(&b, "everything", "*", "100", &[]);
    let mut client = RawClient::connect(&b);
    let first = get(&mut client, uuid::Uuid::nil());
    assert_eq!(first.error_code, 0, "{first:?}");
    let id = first.client_instance_id;
    assert!(!id.is_nil());
    assert_eq!(first.requested_metrics.iter().map(|m| m.as_str()).collect::<Vec<_>>(), vec!["*"]);
    assert_eq!((first.push_interval_ms, first.telemetry_max_bytes, first.delta_temporality), (100, 4096, true));
    assert_eq!(first.accepted_compression_types, vec![4, 3, 1, 2]);

    let otlp = skein_net::telemetry::otlp::MetricsData {
        resource_metrics: vec![skein_net::telemetry::otlp::ResourceMetrics {
            resource: None,
            scope_metrics: vec![skein_net::telemetry::otlp::ScopeMetrics {
                metrics: vec![skein_net::telemetry::otlp::Metric {
                    name: "org.apache.kafka.consumer.poll.idle.ratio.avg".into(),
                    data: Some(skein_net::telemetry::otlp::Data::Gauge(skein_net::telemetry::otlp::Gauge {
                        data_points: vec![skein_net::telemetry::otlp::NumberDataPoint {
                            attributes: vec![],
                            value: Some(skein_net::telemetry::otlp::Number::AsDouble(0.75)),
                        }],
                    })),
                }],
            }],
        }],
    };
    let zstd =
        skein_engine::records::compress(skein_engine::records::Compression::Zstd, &otlp.encode_to_vec()).unwrap();
    assert_eq!(push(&mut client, id, first.subscription_id, zstd.clone()), 0);
    let shown = pushed(&broker, "raw");
    assert!(
        shown
            .iter()
            .any(|l| l.contains("metric=\"org.apache.kafka.consumer.poll.idle.ratio.avg\"") && l.ends_with(" 0.75")),
        "{shown:?}"
    );
    assert_eq!(push(&mut client, id, first.subscription_id, zstd.clone()), 89, "within the interval");

    subscribe(&b, "everything", "*", "200", &[]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(push(&mut client, id, first.subscription_id, zstd.clone()), 117, "a stale subscription id");
    let renewed = get(&mut client, id);
    assert_eq!((renewed.error_code, renewed.client_instance_id, renewed.push_interval_ms), (0, id, 200));
    assert_ne!(renewed.subscription_id, first.subscription_id);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(push(&mut client, id, renewed.subscription_id, vec![1, 2, 3]), 87, "not OTLP");
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(push(&mut client, id, renewed.subscription_id, vec![0; 5000]), 118, "past telemetry.max.bytes");
}
