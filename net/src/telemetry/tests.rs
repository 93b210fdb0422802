use super::*;
use prost::Message as _;

fn client(id: &str) -> ClientInfo {
    ClientInfo {
        client_id: id.into(),
        software_name: "apache-kafka-java".into(),
        software_version: "4.4.0".into(),
        address: "127.0.0.1".into(),
        port: 50_000,
        connection: 1,
    }
}

fn subscriptions(entries: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, BTreeMap<String, String>> {
    entries
        .iter()
        .map(|(name, configs)| {
            (name.to_string(), configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
        })
        .collect()
}

fn push(instance: uuid::Uuid, subscription_id: i32, metrics: &[u8]) -> Push<'_> {
    Push { instance, subscription_id, terminating: false, compression: 0, metrics }
}

// A client gets the metrics of every subscription it matches, at the shortest
// interval; `*` anywhere means all; a client that matches none gets nothing, every
// five minutes; the subscription id is the same on every shard for the same
// instance and changes with what it names.
#[test]
fn subscriptions_join_what_a_client_matches() {
    let now = Instant::now();
    let subs = subscriptions(&[
        (
            "producers",
            &[("metrics", "org.apache.kafka.producer."), ("interval.ms", "2000"), ("match", "client_id=p.*")],
        ),
        ("all-java", &[("metrics", "org.apache.kafka.consumer."), ("interval.ms", "5000")]),
        ("librdkafka", &[("metrics", "*"), ("match", "client_software_name=librdkafka")]),
    ]);
    let mut one = Telemetry::default();
    let (id, got) = one.get_subscription(uuid::Uuid::nil(), &client("p1"), &subs, now).unwrap();
    assert!(!id.is_nil());
    assert_eq!(got.metrics, vec!["org.apache.kafka.consumer.", "org.apache.kafka.producer."]);
    assert_eq!(got.interval_ms, 2000);
    let mut two = Telemetry::default();
    assert_eq!(two.get_subscription(id, &client("p1"), &subs, now).unwrap().1, got, "another shard agrees");
    let (_, consumer) = one.get_subscription(uuid::Uuid::nil(), &client("c1"), &subs, now).unwrap();
    assert_eq!((consumer.metrics.len(), consumer.interval_ms), (1, 5000));
    let rdkafka = ClientInfo { software_name: "librdkafka".into(), ..client("c2") };
    let (_, all) = one.get_subscription(uuid::Uuid::nil(), &rdkafka, &subs, now).unwrap();
    assert_eq!(all.metrics, vec!["*"]);
    let (_, none) = one.get_subscription(uuid::Uuid::nil(), &client("x"), &BTreeMap::new(), now).unwrap();
    assert_eq!((none.metrics.len(), none.interval_ms), (0, 300_000));
}

// Kafka's timing rules: a second request for the subscription within the interval
// is throttled; the first push after it is taken at once, the next within the
// interval throttled; a push naming an old subscription id is refused so the client
// asks again, and that ask is not throttled; after a terminating push nothing is
// taken.
#[test]
fn requests_follow_kafkas_timing_and_subscription_rules() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mut subs = subscriptions(&[("all", &[("metrics", "*"), ("interval.ms", "1000")])]);
    let mut tel = Telemetry::default();
    let c = client("p1");
    let (id, sub) = tel.get_subscription(uuid::Uuid::nil(), &c, &subs, t0).unwrap();
    assert_eq!(tel.get_subscription(id, &c, &subs, ms(10)).unwrap_err().0, THROTTLING_QUOTA_EXCEEDED);
    assert_eq!(tel.push(push(id, sub.id, b""), &c, &subs, 1 << 20, ms(20)), Ok(()));
    assert_eq!(tel.push(push(id, sub.id, b""), &c, &subs, 1 << 20, ms(30)).unwrap_err().0, THROTTLING_QUOTA_EXCEEDED);
    assert_eq!(tel.push(push(id, sub.id, b""), &c, &subs, 1 << 20, ms(1100)), Ok(()));
    // The subscription changes: the old id is refused, and asking again at once works.
    subs.get_mut("all").unwrap().insert("interval.ms".into(), "500".into());
    let refused = tel.push(push(id, sub.id, b""), &c, &subs, 1 << 20, ms(2200)).unwrap_err();
    assert_eq!(
        refused,
        (UNKNOWN_SUBSCRIPTION_ID, format!("Unknown client subscription id for the client [{}]", uuid_text(id)))
    );
    let (same, renewed) = tel.get_subscription(id, &c, &subs, ms(2201)).unwrap();
    assert_eq!((same, renewed.interval_ms), (id, 500));
    assert_ne!(renewed.id, sub.id);
    // That ask did not count as a request for the subscription (as on Kafka: the
    // refused push did), so the next push is due an interval after the refused one.
    assert_eq!(
        tel.push(push(id, renewed.id, b""), &c, &subs, 1 << 20, ms(2300)).unwrap_err().0,
        THROTTLING_QUOTA_EXCEEDED
    );
    // Compression and size are checked after the subscription.
    let bad = Push { compression: 9, ..push(id, renewed.id, b"") };
    assert_eq!(tel.push(bad, &c, &subs, 1 << 20, ms(2800)).unwrap_err().0, UNSUPPORTED_COMPRESSION_TYPE);
    assert_eq!(tel.get_subscription(id, &c, &subs, ms(2801)).map(|s| s.0), Ok(id), "not throttled after it");
    let big = vec![0u8; 101];
    assert_eq!(tel.push(push(id, renewed.id, &big), &c, &subs, 100, ms(3400)).unwrap_err().0, TELEMETRY_TOO_LARGE);
    // A terminating push is taken within the interval; nothing after it is.
    let last = Push { terminating: true, ..push(id, renewed.id, b"") };
    assert_eq!(tel.push(last, &c, &subs, 1 << 20, ms(3450)), Ok(()));
    let after = tel.push(push(id, renewed.id, b""), &c, &subs, 1 << 20, ms(5000)).unwrap_err();
    assert_eq!(after.0, code::INVALID_REQUEST);
    assert!(after.1.contains("terminating"), "{after:?}");
    for reserved in [uuid::Uuid::nil(), uuid::Uuid::from_u128(1)] {
        assert_eq!(
            tel.push(push(reserved, 0, b""), &c, &subs, 1 << 20, ms(6000)).unwrap_err().0,
            code::INVALID_REQUEST
        );
    }
}

// A push's points reach the series table under the client's id and software; bytes
// that are not OTLP are refused with INVALID_RECORD and counted; instances leave
// with their connection, and the table stays within its bound.
#[test]
fn pushed_points_become_series_and_instances_stay_bounded() {
    let now = Instant::now();
    let subs = subscriptions(&[("all", &[("metrics", "*"), ("interval.ms", "1000")])]);
    let mut tel = Telemetry::default();
    let c = client("p1");
    let (id, sub) = tel.get_subscription(uuid::Uuid::nil(), &c, &subs, now).unwrap();
    let raw = otlp::tests_sample().encode_to_vec();
    assert_eq!(tel.push(push(id, sub.id, &raw), &c, &subs, 1 << 20, now), Ok(()));
    let ((client_id, instance), series) = tel.series.clients().next().unwrap();
    assert_eq!((client_id.as_str(), *instance, series.software.as_str()), ("p1", id, "apache-kafka-java/4.4.0"));
    assert_eq!(series.series.len(), 4);
    let later = now + Duration::from_secs(2);
    assert_eq!(tel.push(push(id, sub.id, b"\xff\xff"), &c, &subs, 1 << 20, later).unwrap_err().0, code::INVALID_RECORD);
    assert_eq!(tel.metrics.invalid_pushes, 1);
    tel.connection_closed(1);
    assert_eq!(tel.instances(), 0);
    for n in 0..TELEMETRY_INSTANCES_PER_SHARD_MAX + 10 {
        let c = ClientInfo { connection: n as u64, ..client("many") };
        tel.get_subscription(uuid::Uuid::nil(), &c, &subs, now).unwrap();
    }
    assert_eq!(tel.instances(), TELEMETRY_INSTANCES_PER_SHARD_MAX);
    assert_eq!(tel.metrics.evicted, 10);
}
