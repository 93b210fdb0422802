//! The OpenTelemetry metrics that clients push (KIP-714): OTLP's `MetricsData`
//! protobuf (opentelemetry-proto `metrics/v1/metrics.proto`), compressed with one of
//! Kafka's record codecs. Only what `/metrics` shows is declared here: each metric's
//! name, its gauge or sum points, a histogram's or summary's count and sum, and the
//! attributes of resources and points with scalar values. prost skips every other
//! field, so a newer client's additions decode.

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

/// Decodes a push's `metrics` bytes compressed with `compression` (Kafka's codec ids).
///
/// # Errors
/// A message for an unknown codec, a payload that does not decompress within
/// `max_bytes`, or one that is not a `MetricsData`.
pub fn decode(compression: i8, bytes: &[u8], max_bytes: usize) -> Result<Vec<Point>, String> {
    let codec = Compression::from_attributes(i16::from(compression))
        .ok()
        .filter(|_| (0..=4).contains(&compression))
        .ok_or_else(|| format!("unknown compression type {compression}"))?;
    let raw = skein_engine::records::decompress(codec, bytes, max_bytes)
        .map_err(|e| format!("metrics did not decompress: {e}"))?;
    let data = MetricsData::decode(raw.as_slice()).map_err(|e| format!("metrics are not OTLP MetricsData: {e}"))?;
    Ok(flatten(data))
}

fn flatten(data: MetricsData) -> Vec<Point> {
    let mut points = Vec::new();
    for resource in data.resource_metrics {
        for metric in resource.scope_metrics.into_iter().flat_map(|s| s.metrics) {
            let name = metric.name;
            match metric.data {
                Some(Data::Gauge(gauge)) => {
                    points.extend(gauge.data_points.into_iter().filter_map(|p| number(&name, p, Kind::Last)));
                }
                Some(Data::Sum(sum)) => {
                    let kind = if sum.aggregation_temporality == DELTA { Kind::Add } else { Kind::Last };
                    points.extend(sum.data_points.into_iter().filter_map(|p| number(&name, p, kind)));
                }
                Some(Data::Histogram(histogram)) => {
                    let kind = if histogram.aggregation_temporality == DELTA { Kind::Add } else { Kind::Last };
                    for p in histogram.data_points {
                        let attributes = attributes(p.attributes);
                        if let Some(sum) = p.sum {
                            points.push(Point {
                                metric: format!("{name}_sum"),
                                attributes: attributes.clone(),
                                value: sum,
                                kind,
                            });
                        }
                        points.push(Point { metric: format!("{name}_count"), attributes, value: p.count as f64, kind });
                    }
                }
                Some(Data::Summary(summary)) => {
                    for p in summary.data_points {
                        let attributes = attributes(p.attributes);
                        let sum = Point { metric: format!("{name}_sum"), attributes, value: p.sum, kind: Kind::Last };
                        let count = Point { metric: format!("{name}_count"), value: p.count as f64, ..sum.clone() };
                        points.extend([sum, count]);
                    }
                }
                None => {}
            }
        }
    }
    points
}

fn number(name: &str, point: NumberDataPoint, kind: Kind) -> Option<Point> {
    let value = match point.value? {
        Number::AsDouble(v) => v,
        Number::AsInt(v) => v as f64,
    };
    Some(Point { metric: name.to_owned(), attributes: attributes(point.attributes), value, kind })
}

/// Attributes with scalar values, as text.
fn attributes(pairs: Vec<KeyValue>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .filter_map(|kv| {
            let value = match kv.value?.value? {
                Scalar::String(s) => s,
                Scalar::Bool(b) => b.to_string(),
                Scalar::Int(i) => i.to_string(),
                Scalar::Double(d) => d.to_string(),
            };
            Some((kv.key, value))
        })
        .collect()
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
        let expected = decode(0, &raw, 1 << 20).unwrap();
        assert_eq!(expected.len(), 4, "{expected:?}");
        assert_eq!(expected[0].value, 12.5);
        assert_eq!(expected[1].kind, Kind::Add);
        assert_eq!(expected[1].attributes, vec![("topic".to_string(), "orders".to_string())]);
        assert_eq!(expected[2].metric, "org.apache.kafka.producer.request.latency_sum");
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let packed = skein_engine::records::compress(codec, &raw).unwrap();
            assert_eq!(decode(codec as i8, &packed, 1 << 20).unwrap(), expected, "{codec:?}");
        }
        assert!(decode(5, &raw, 1 << 20).unwrap_err().contains("unknown compression"));
        assert!(decode(-1, &raw, 1 << 20).is_err());
        assert!(decode(0, &raw, 10).unwrap_err().contains("decompress"));
        assert!(decode(0, &[0xff, 0xff, 0xff], 1 << 20).unwrap_err().contains("OTLP"));
    }
}
