//! Client metrics subscriptions (KIP-714): the CLIENT_METRICS config resources that
//! `kafka-client-metrics` manages, each naming the metrics (name prefixes, `*` for
//! all) that matching clients push, how often, and which clients match. They are
//! validated as Kafka 4.4's `ClientMetricsConfigs` validates them, kept in the
//! metadata log (`MetadataImage::client_metrics`, Kafka's ConfigRecord for
//! CLIENT_METRICS resources) and described with Kafka's defaults.

use std::collections::BTreeMap;

use skein_control::configs::ConfigType;
use skein_control::errors::code;
use skein_control::metadata::Refusal;

pub const METRICS: &str = "metrics";
pub const INTERVAL_MS: &str = "interval.ms";
pub const MATCH: &str = "match";

/// Kafka's default push interval, and the interval's bounds.
pub const INTERVAL_MS_DEFAULT: i32 = 300_000;
const INTERVAL_MS_MIN: i64 = 100;
const INTERVAL_MS_MAX: i64 = 3_600_000;

/// The client properties a `match` entry may select on.
pub const MATCH_PARAMS: &[&str] = &[
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
];

/// Each config of a client-metrics resource: its name, default, type and doc.
pub const CONFIGS: &[(&str, &str, ConfigType, &str)] = &[
    (METRICS, "", ConfigType::List, "Telemetry metric name prefix list"),
    (INTERVAL_MS, "300000", ConfigType::Int, "Metrics push interval in milliseconds"),
    (MATCH, "", ConfigType::List, "Client match criteria"),
];

fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect()
}

/// A subscription's `match` entries, `param=regex`, as Kafka parses them.
///
/// # Errors
/// INVALID_CONFIG, `Illegal client matching pattern: <entry>`, for an entry that is
/// not `param=regex` with a known param and a valid regex.
pub fn parse_match(value: &str) -> Result<Vec<(String, regex::Regex)>, Refusal> {
    list(value)
        .into_iter()
        .map(|entry| {
            let illegal = || (code::INVALID_CONFIG, format!("Illegal client matching pattern: {entry}"));
            let parts: Vec<&str> = entry.split('=').collect();
            let [param, pattern] = parts[..] else { return Err(illegal()) };
            let param = param.trim();
            if !MATCH_PARAMS.contains(&param) {
                return Err(illegal());
            }
            // Java's Pattern.matcher(...).matches(): the whole value.
            let regex = regex::Regex::new(&format!("^(?:{})$", pattern.trim())).map_err(|_| illegal())?;
            Ok((param.to_owned(), regex))
        })
        .collect()
}

/// Kafka's `ClientMetricsConfigs.validate` for the configs a resource would have.
///
/// # Errors
/// INVALID_REQUEST for an empty name, an unknown config, a duplicate list entry or an
/// interval out of bounds; INVALID_CONFIG for a value of the wrong type or a bad
/// `match` entry; each with Kafka's message.
pub fn validate(name: &str, configs: &BTreeMap<String, String>) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err((code::INVALID_REQUEST, "Subscription name can't be empty".into()));
    }
    for (key, value) in configs {
        match key.as_str() {
            METRICS | MATCH => {
                let items = list(value);
                if items.iter().enumerate().any(|(i, item)| items[..i].contains(item)) {
                    return Err((
                        code::INVALID_CONFIG,
                        format!("Invalid value {value} for configuration {key}: Configuration '{key}' values must not be duplicated."),
                    ));
                }
                if key == MATCH {
                    parse_match(value)?;
                }
            }
            INTERVAL_MS => {
                let Ok(interval) = value.trim().parse::<i64>() else {
                    return Err((
                        code::INVALID_CONFIG,
                        format!("Invalid value {value} for configuration {INTERVAL_MS}: Not a number of type INT"),
                    ));
                };
                if !(INTERVAL_MS_MIN..=INTERVAL_MS_MAX).contains(&interval) {
                    return Err((
                        code::INVALID_REQUEST,
                        format!(
                            "Invalid value {interval} for {INTERVAL_MS}, interval must be between {INTERVAL_MS_MIN} and \
                             {INTERVAL_MS_MAX} (1 hour)"
                        ),
                    ));
                }
            }
            other => return Err((code::INVALID_REQUEST, format!("Unknown client metrics configuration: {other}"))),
        }
    }
    Ok(())
}

/// A resource's configs as DescribeConfigs shows them: each of the three, its value
/// and whether the resource sets it (else Kafka's default).
pub fn describe(
    configs: Option<&BTreeMap<String, String>>,
) -> Vec<(&'static str, String, bool, ConfigType, &'static str)> {
    CONFIGS
        .iter()
        .map(|(name, default, kind, doc)| match configs.and_then(|c| c.get(*name)) {
            Some(value) => (*name, value.clone(), true, *kind, *doc),
            None => (*name, default.to_string(), false, *kind, *doc),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn kafka_validation_and_messages() {
        let good = configs(&[
            (METRICS, "org.apache.kafka.producer.,org.apache.kafka.consumer."),
            (INTERVAL_MS, "1000"),
            (MATCH, "client_id=app-.*"),
        ]);
        assert!(validate("sub", &good).is_ok());
        assert_eq!(validate("", &good).unwrap_err().1, "Subscription name can't be empty");
        let unknown = configs(&[("colour", "blue")]);
        assert_eq!(
            validate("sub", &unknown).unwrap_err(),
            (code::INVALID_REQUEST, "Unknown client metrics configuration: colour".into())
        );
        let slow = configs(&[(INTERVAL_MS, "99")]);
        assert_eq!(
            validate("sub", &slow).unwrap_err().1,
            "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)"
        );
        let bad_match = configs(&[(MATCH, "client_colour=x")]);
        assert_eq!(
            validate("sub", &bad_match).unwrap_err(),
            (code::INVALID_CONFIG, "Illegal client matching pattern: client_colour=x".into())
        );
        let matches = parse_match("client_id=app-.*, client_software_name=apache-kafka-java").unwrap();
        assert!(matches[0].1.is_match("app-1") && !matches[0].1.is_match("my-app-1"));
        let described = describe(Some(&configs(&[(INTERVAL_MS, "1000")])));
        assert_eq!(described[1].1, "1000");
        assert!(described[1].2 && !described[0].2);
    }
}
