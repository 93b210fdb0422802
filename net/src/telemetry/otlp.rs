//! The OpenTelemetry metrics that clients push (KIP-714): OTLP's `MetricsData`
//! protobuf (opentelemetry-proto `metrics/v1/metrics.proto`), compressed with one of
//! Kafka's record codecs. `decode` walks the message with prost's wire primitives and
//! keeps each metric's gauge or sum points and a histogram's or summary's count and
//! sum, with the points' scalar attributes; every other field is skipped, so a newer
//! client's additions decode. The structs below are the part of the schema read
//! (clients of this module, such as tests, encode pushes with them).

use prost::Message;

use skein_engine::records::Compression;

#[derive(Clone, PartialEq, Message)]
pub struct MetricsData {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeMetrics {
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(oneof = "Data", tags = "5, 7, 9, 11")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "9")]
    Histogram(Histogram),
    #[prost(message, tag = "11")]
    Summary(Summary),
}

#[derive(Clone, PartialEq, Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

/// OTLP's AggregationTemporality: a sum's points are deltas since the last push, or
/// totals since `start_time_unix_nano`.
pub const DELTA: i32 = 1;

#[derive(Clone, PartialEq, Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<CountDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<SummaryDataPoint>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(oneof = "Number", tags = "4, 6")]
    pub value: Option<Number>,
}

#[derive(Clone, Copy, PartialEq, prost::Oneof)]
pub enum Number {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

/// A histogram's point, with its count and sum (the buckets are not kept).
#[derive(Clone, PartialEq, Message)]
pub struct CountDataPoint {
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SummaryDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, tag = "5")]
    pub sum: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(oneof = "Scalar", tags = "1, 2, 3, 4")]
    pub value: Option<Scalar>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Scalar {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

/// How a point's value joins what `/metrics` already shows for its series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// The value replaces the last (gauges, cumulative sums).
    Last,
    /// The value is added to the series' total (delta sums, counts).
    Add,
}

/// One value of one metric, flattened: the metric's name (with `_count` or `_sum`
/// for histograms and summaries), its point's attributes, and how it joins.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub metric: String,
    pub attributes: Vec<(String, String)>,
    pub value: f64,
    pub kind: Kind,
}

/// A push's points, and how many more it had past `POINTS_PER_PUSH_MAX`.
#[derive(Debug, Default, PartialEq)]
pub struct Decoded {
    pub points: Vec<Point>,
    pub dropped: u64,
}

/// Points taken from one push: as many as one client's series may be.
const POINTS_PER_PUSH_MAX: usize = skein_control::limits::TELEMETRY_SERIES_PER_CLIENT_MAX;

/// Attributes kept per point; the rest are left out.
const ATTRIBUTES_PER_POINT_MAX: usize = 16;

/// Decodes a push's `metrics` bytes compressed with `compression` (Kafka's codec ids).
///
/// The message is walked, not decoded whole: protobuf's repeated messages cost many
/// times their wire size in memory (an empty `Metric` is 2 bytes on the wire and
/// about 100 in a struct), so each level is visited in place and only the points
/// kept, at most `POINTS_PER_PUSH_MAX`. Memory is the decompressed bytes (at most
/// `max_bytes`) and the points.
///
/// # Errors
/// A message for an unknown codec, a payload that does not decompress within
/// `max_bytes`, or one that is not a `MetricsData`.
pub fn decode(compression: i8, bytes: &[u8], max_bytes: usize) -> Result<Decoded, String> {
    let codec = Compression::from_attributes(i16::from(compression))
        .ok()
        .filter(|_| (0..=4).contains(&compression))
        .ok_or_else(|| format!("unknown compression type {compression}"))?;
    let raw = skein_engine::records::decompress(codec, bytes, max_bytes)
        .map_err(|e| format!("metrics did not decompress: {e}"))?;
    let mut decoded = Decoded::default();
    walk(&raw, &mut decoded).map_err(|e| format!("metrics are not OTLP MetricsData: {e}"))?;
    Ok(decoded)
}

/// A field's value on the wire.
enum Value<'a> {
    Bytes(&'a [u8]),
    Int(u64),
}

/// Calls `each` with every field of the message in `buf`, in order.
fn fields<'a>(mut buf: &'a [u8], mut each: impl FnMut(u32, Value<'a>) -> Result<(), String>) -> Result<(), String> {
    use prost::encoding::{decode_key, decode_varint, WireType};
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        let value = match wire {
            WireType::Varint => Value::Int(decode_varint(&mut buf).map_err(|e| e.to_string())?),
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let n = if wire == WireType::SixtyFourBit { 8 } else { 4 };
                let Some((word, rest)) = buf.split_at_checked(n) else { return Err("truncated".into()) };
                buf = rest;
                let mut le = [0u8; 8];
                le[..n].copy_from_slice(word);
                Value::Int(u64::from_le_bytes(le))
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut buf).map_err(|e| e.to_string())?;
                let Some((field, rest)) = usize::try_from(len).ok().and_then(|l| buf.split_at_checked(l)) else {
                    return Err("truncated".into());
                };
                buf = rest;
                Value::Bytes(field)
            }
            WireType::StartGroup | WireType::EndGroup => return Err("groups are not used by OTLP".into()),
        };
        each(tag, value)?;
    }
    Ok(())
}

/// The sub-messages of field `tag`, each passed to `each`.
fn each_message<'a>(
    buf: &'a [u8],
    tag: u32,
    mut each: impl FnMut(&'a [u8]) -> Result<(), String>,
) -> Result<(), String> {
    fields(buf, |t, value| match (t == tag, value) {
        (true, Value::Bytes(message)) => each(message),
        (true, Value::Int(_)) => Err(format!("field {tag} is not a message")),
        _ => Ok(()),
    })
}

/// MetricsData (1: resource_metrics) -> ResourceMetrics (2: scope_metrics) ->
/// ScopeMetrics (2: metrics) -> each Metric.
fn walk(raw: &[u8], decoded: &mut Decoded) -> Result<(), String> {
    each_message(raw, 1, |resource| {
        each_message(resource, 2, |scope| each_message(scope, 2, |metric| walk_metric(metric, decoded)))
    })
}

/// A Metric: 1 name, then its data: 5 gauge, 7 sum, 9 histogram, 11 summary.
fn walk_metric(metric: &[u8], decoded: &mut Decoded) -> Result<(), String> {
    let mut name: &[u8] = b"";
    let mut data: Option<(u32, &[u8])> = None;
    fields(metric, |tag, value| {
        match (tag, value) {
            (1, Value::Bytes(n)) => name = n,
            (5 | 7 | 9 | 11, Value::Bytes(d)) => data = Some((tag, d)),
            _ => {}
        }
        Ok(())
    })?;
    let name = std::str::from_utf8(name).map_err(|_| "a metric name is not UTF-8".to_string())?;
    let Some((kind, data)) = data else { return Ok(()) };
    // Sum (7) and Histogram (9): 2 aggregation_temporality.
    let mut temporality = 0;
    fields(data, |tag, value| {
        if let (2, Value::Int(t)) = (tag, value) {
            temporality = t;
        }
        Ok(())
    })?;
    let joins = if temporality == DELTA as u64 { Kind::Add } else { Kind::Last };
    each_message(data, 1, |point| {
        let point = walk_point(kind, point)?;
        for (suffix, value, joins) in point.values(kind, joins) {
            if decoded.points.len() >= POINTS_PER_PUSH_MAX {
                decoded.dropped += 1;
                continue;
            }
            let metric = format!("{name}{suffix}");
            decoded.points.push(Point { metric, attributes: point.attributes.clone(), value, kind: joins });
        }
        Ok(())
    })
}

/// One data point's fields.
#[derive(Default)]
struct RawPoint {
    attributes: Vec<(String, String)>,
    number: Option<f64>,
    count: u64,
    sum: Option<f64>,
}

impl RawPoint {
    /// The values a point gives: a number, or a count and a sum (`_count`, `_sum`).
    fn values(&self, kind: u32, joins: Kind) -> Vec<(&'static str, f64, Kind)> {
        match kind {
            5 | 7 => self.number.map(|v| ("", v, joins)).into_iter().collect(),
            // A summary's count and sum are since its start.
            11 => vec![("_sum", self.sum.unwrap_or(0.0), Kind::Last), ("_count", self.count as f64, Kind::Last)],
            _ => {
                let sum = self.sum.map(|s| ("_sum", s, joins));
                sum.into_iter().chain([("_count", self.count as f64, joins)]).collect()
            }
        }
    }
}

/// NumberDataPoint (7 attributes, 4 as_double, 6 as_int), HistogramDataPoint
/// (9 attributes, 4 count, 5 sum) or SummaryDataPoint (7 attributes, 4 count, 5 sum).
fn walk_point(kind: u32, point: &[u8]) -> Result<RawPoint, String> {
    let attributes_tag = if kind == 9 { 9 } else { 7 };
    let mut raw = RawPoint::default();
    fields(point, |tag, value| {
        match (tag, value) {
            (t, Value::Bytes(kv)) if t == attributes_tag && raw.attributes.len() < ATTRIBUTES_PER_POINT_MAX => {
                let kv = KeyValue::decode(kv).map_err(|e| e.to_string())?;
                raw.attributes.extend(attribute(kv));
            }
            (4, Value::Int(bits)) if kind == 5 || kind == 7 => raw.number = Some(f64::from_bits(bits)),
            (6, Value::Int(bits)) if kind == 5 || kind == 7 => raw.number = Some(bits as i64 as f64),
            (4, Value::Int(count)) => raw.count = count,
            (5, Value::Int(bits)) => raw.sum = Some(f64::from_bits(bits)),
            _ => {}
        }
        Ok(())
    })?;
    Ok(raw)
}

/// An attribute with a scalar value, as text.
fn attribute(kv: KeyValue) -> Option<(String, String)> {
    let value = match kv.value?.value? {
        Scalar::String(s) => s,
        Scalar::Bool(b) => b.to_string(),
        Scalar::Int(i) => i.to_string(),
        Scalar::Double(d) => d.to_string(),
    };
    Some((kv.key, value))
}

#[cfg(test)]
fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(Scalar::String(value.into())) }) }
}

/// A push as a Java client sends one: a gauge, a delta sum and a histogram.
#[cfg(test)]
pub(crate) fn tests_sample() -> MetricsData {
    let point = |value: Number, attrs: Vec<KeyValue>| NumberDataPoint { attributes: attrs, value: Some(value) };
    let metrics = vec![
        Metric {
            name: "org.apache.kafka.producer.record.send.rate".into(),
            data: Some(Data::Gauge(Gauge { data_points: vec![point(Number::AsDouble(12.5), vec![])] })),
        },
        Metric {
            name: "org.apache.kafka.producer.record.send.total".into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![point(Number::AsInt(40), vec![kv("topic", "orders")])],
                aggregation_temporality: DELTA,
                is_monotonic: true,
            })),
        },
        Metric {
            name: "org.apache.kafka.producer.request.latency".into(),
            data: Some(Data::Histogram(Histogram {
                data_points: vec![CountDataPoint { attributes: vec![], count: 3, sum: Some(9.0) }],
                aggregation_temporality: 2,
            })),
        },
    ];
    MetricsData {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource { attributes: vec![kv("client_id", "p1")] }),
            scope_metrics: vec![ScopeMetrics { metrics }],
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every codec Kafka accepts for a push decodes to the same points; an unknown
    // codec, a payload past the bound and bytes that are not OTLP are refused.
    #[test]
    fn pushes_decode_with_each_codec_and_refuse_the_rest() {
        let raw = tests_sample().encode_to_vec();
        let expected = decode(0, &raw, 1 << 20).unwrap().points;
        assert_eq!(expected.len(), 4, "{expected:?}");
        assert_eq!(expected[0].value, 12.5);
        assert_eq!(expected[1].kind, Kind::Add);
        assert_eq!(expected[1].attributes, vec![("topic".to_string(), "orders".to_string())]);
        assert_eq!(expected[2].metric, "org.apache.kafka.producer.request.latency_sum");
        skein_control::capture::seed("telemetry_push", "none", &[&[0u8][..], &raw[..]].concat());
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let packed = skein_engine::records::compress(codec, &raw).unwrap();
            assert_eq!(decode(codec as i8, &packed, 1 << 20).unwrap().points, expected, "{codec:?}");
            // The `telemetry_push` fuzz target's seeds: the codec's id, then the push.
            skein_control::capture::seed(
                "telemetry_push",
                &format!("{codec:?}"),
                &[&[codec as u8][..], &packed[..]].concat(),
            );
        }
        assert!(decode(5, &raw, 1 << 20).unwrap_err().contains("unknown compression"));
        assert!(decode(-1, &raw, 1 << 20).is_err());
        assert!(decode(0, &raw, 10).unwrap_err().contains("decompress"));
        assert!(decode(0, &[0xff, 0xff, 0xff], 1 << 20).unwrap_err().contains("OTLP"));
    }

    // What a hostile push can make the broker hold is bounded: empty repeated
    // messages are walked, not built; points past the push's cap and attributes past
    // a point's are left out (and counted); truncated fields are refused.
    #[test]
    fn hostile_pushes_stay_within_their_bounds() {
        let empty_metrics = ScopeMetrics { metrics: vec![Metric { name: String::new(), data: None }; 200_000] };
        let data = MetricsData {
            resource_metrics: vec![ResourceMetrics { resource: None, scope_metrics: vec![empty_metrics] }],
        };
        assert_eq!(decode(0, &data.encode_to_vec(), 4 << 20).unwrap(), Decoded::default());
        let point = NumberDataPoint {
            attributes: (0..100).map(|i| kv(&format!("k{i}"), "v")).collect(),
            value: Some(Number::AsInt(1)),
        };
        let many = Metric {
            name: "m".into(),
            data: Some(Data::Gauge(Gauge { data_points: vec![point; POINTS_PER_PUSH_MAX + 7] })),
        };
        let data = MetricsData {
            resource_metrics: vec![ResourceMetrics {
                resource: None,
                scope_metrics: vec![ScopeMetrics { metrics: vec![many] }],
            }],
        };
        let decoded = decode(0, &data.encode_to_vec(), 16 << 20).unwrap();
        assert_eq!((decoded.points.len(), decoded.dropped), (POINTS_PER_PUSH_MAX, 7));
        assert_eq!(decoded.points[0].attributes.len(), ATTRIBUTES_PER_POINT_MAX);
        let mut truncated = tests_sample().encode_to_vec();
        truncated.truncate(truncated.len() - 3);
        assert!(decode(0, &truncated, 1 << 20).is_err());
    }
}
