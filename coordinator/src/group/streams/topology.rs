//! A streams group's topology (KIP-1071) and its configuration against the cluster's
//! topics, as Kafka 4.4's `InternalTopicManager` decides it: every source topic must
//! exist; repartition topics without a fixed partition count take the largest count
//! of the topics that feed them; copartitioned topics must agree; changelog topics
//! get the task count of their subtopology. Internal topics that do not exist yet
//! are named for the coordinator to create, and the group waits for them (the
//! MISSING_INTERNAL_TOPICS status) before it assigns tasks.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, TopicInfo, Topology};
use skein_control::errors::code;

/// Heartbeat statuses, as Kafka 4.4's `StreamsGroupHeartbeatResponse.Status` numbers
/// them.
pub const STALE_TOPOLOGY: i8 = 0;
pub const MISSING_SOURCE_TOPICS: i8 = 1;
pub const INCORRECTLY_PARTITIONED_TOPICS: i8 = 2;
pub const MISSING_INTERNAL_TOPICS: i8 = 3;
pub const SHUTDOWN_APPLICATION: i8 = 4;
pub const ASSIGNMENT_DELAYED: i8 = 5;

/// An internal topic the group needs: a repartition or changelog topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopic {
    pub name: String,
    pub partitions: i32,
    /// -1: the broker's default.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// The topology configured against the topics that exist now.
#[derive(Debug, Clone, PartialEq)]
pub struct Configured {
    pub epoch: i32,
    /// The task count of each subtopology, by id; empty when the topics did not
    /// allow a configuration.
    pub tasks: BTreeMap<String, i32>,
    /// Internal topics to create before the group may be assigned tasks.
    pub to_create: Vec<InternalTopic>,
    /// Why the group cannot be assigned tasks now: a status code and its detail.
    pub problem: Option<(i8, String)>,
    /// The partition counts it was configured with (`None`: the topic is absent), to
    /// configure it again when they change.
    pub counts: BTreeMap<String, Option<i32>>,
}

impl Configured {
    pub fn ready(&self) -> bool {
        self.problem.is_none()
    }
}

fn name(info: &TopicInfo) -> String {
    info.name.0.to_string()
}

fn sources(sub: &Subtopology) -> impl Iterator<Item = String> + '_ {
    sub.source_topics.iter().map(|t| t.0.to_string())
}

/// Every topic the topology reads or keeps state in.
pub fn required_topics(topology: &Topology) -> BTreeSet<String> {
    let mut topics = BTreeSet::new();
    for sub in &topology.subtopologies {
        topics.extend(sources(sub));
        topics.extend(sub.repartition_source_topics.iter().map(name));
        topics.extend(sub.state_changelog_topics.iter().map(name));
    }
    topics
}

/// The topics whose partitions are a subtopology's tasks: its source topics and its
/// repartition source topics.
pub fn input_topics(sub: &Subtopology) -> BTreeSet<String> {
    sources(sub).chain(sub.repartition_source_topics.iter().map(name)).collect()
}

/// The request's topology in a canonical order (subtopologies by id), to compare two.
pub fn canonical(topology: &Topology) -> Topology {
    let mut topology = topology.clone();
    topology.subtopologies.sort_by(|a, b| a.subtopology_id.cmp(&b.subtopology_id));
    topology
}

/// Checks a topology sent by a joining member, as Kafka's `GroupCoordinatorService`
/// does before the coordinator sees it.
///
/// # Errors
/// INVALID_REQUEST for regular expressions, which Kafka 4.4 does not support yet, and
/// STREAMS_INVALID_TOPOLOGY for a changelog topic with a partition count.
pub fn validate(topology: &Topology) -> Result<(), skein_control::errors::Refusal> {
    for sub in &topology.subtopologies {
        if !sub.source_topic_regex.is_empty() {
            return Err((code::INVALID_REQUEST, "Regular expressions for source topics are not supported yet.".into()));
        }
        if let Some(info) = sub.state_changelog_topics.iter().find(|t| t.partitions != 0) {
            return Err((
                code::STREAMS_INVALID_TOPOLOGY,
                format!(
                    "Changelog topic {} must have an undefined partition count, but it is set to {}.",
                    name(info),
                    info.partitions
                ),
            ));
        }
    }
    Ok(())
}

/// Kafka's `summarizeTopics`: at most three names, then how many more.
fn summarize<'a>(topics: impl IntoIterator<Item = &'a String>) -> String {
    let topics: Vec<&String> = topics.into_iter().collect();
    if topics.is_empty() {
        return "<none>".into();
    }
    let shown: Vec<&str> = topics.iter().take(3).map(|t| t.as_str()).collect();
    let more = topics.len().saturating_sub(3);
    match more {
        0 => shown.join(", "),
        n => format!("{} and {n} additional topics", shown.join(", ")),
    }
}

/// A configuration failure: a status for the member, or STREAMS_INVALID_TOPOLOGY.
enum Failure {
    Status(i8, String),
    Invalid(String),
}

/// Configures `topology` against the partition counts `count` gives (`None`: no
/// such topic).
///
/// # Errors
/// STREAMS_INVALID_TOPOLOGY with Kafka's message, for a topology whose repartition
/// topics cannot be sized.
pub fn configure(
    topology: &Topology,
    count: impl Fn(&str) -> Option<i32>,
) -> Result<Configured, skein_control::errors::Refusal> {
    let counts: BTreeMap<String, Option<i32>> =
        required_topics(topology).into_iter().map(|t| (t.clone(), count(&t))).collect();
    let unconfigured = |problem| Configured {
        epoch: topology.epoch,
        tasks: BTreeMap::new(),
        to_create: Vec::new(),
        problem: Some(problem),
        counts: counts.clone(),
    };
    match configure_counts(topology, &counts) {
        Ok((tasks, to_create)) => {
            let problem = (!to_create.is_empty()).then(|| {
                let names: Vec<String> = to_create.iter().map(|t| t.name.clone()).collect();
                (MISSING_INTERNAL_TOPICS, format!("Internal topics are missing: {}", summarize(&names)))
            });
            Ok(Configured { epoch: topology.epoch, tasks, to_create, problem, counts })
        }
        Err(Failure::Status(status, detail)) => Ok(unconfigured((status, detail))),
        Err(Failure::Invalid(message)) => Err((code::STREAMS_INVALID_TOPOLOGY, message)),
    }
}

type Counts = BTreeMap<String, Option<i32>>;

fn configure_counts(
    topology: &Topology,
    counts: &Counts,
) -> Result<(BTreeMap<String, i32>, Vec<InternalTopic>), Failure> {
    let repartition: BTreeSet<String> =
        topology.subtopologies.iter().flat_map(|s| s.repartition_source_topics.iter().map(name)).collect();
    let missing: BTreeSet<String> = topology
        .subtopologies
        .iter()
        .flat_map(sources)
        .filter(|t| !repartition.contains(t) && counts.get(t).copied().flatten().is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Failure::Status(
            MISSING_SOURCE_TOPICS,
            format!("Source topics {} are missing.", summarize(&missing)),
        ));
    }
    let existing = |topic: &str| counts.get(topic).copied().flatten();
    let mut decided = repartition_counts(topology, &existing)?;
    enforce_copartitioning(topology, &existing, &mut decided)?;
    let known = |topic: &str| existing(topic).or_else(|| decided.get(topic).copied());
    let mut tasks = BTreeMap::new();
    let mut wanted: BTreeMap<String, InternalTopic> = BTreeMap::new();
    for sub in &topology.subtopologies {
        let id = sub.subtopology_id.to_string();
        let Some(n) = input_topics(sub).iter().filter_map(|t| known(t)).max() else {
            return Err(Failure::Invalid(format!("No source topics found for subtopology {id}")));
        };
        tasks.insert(id, n);
        for info in &sub.repartition_source_topics {
            let partitions = if info.partitions != 0 { info.partitions } else { known(&name(info)).unwrap_or(n) };
            wanted.insert(name(info), internal(info, partitions));
        }
        for info in &sub.state_changelog_topics {
            wanted.insert(name(info), internal(info, n));
        }
    }
    let mut to_create = Vec::new();
    for (topic, want) in wanted {
        match existing(&topic) {
            None => to_create.push(want),
            Some(found) if found != want.partitions => {
                return Err(Failure::Status(
                    INCORRECTLY_PARTITIONED_TOPICS,
                    format!(
                        "Existing topic {topic} has different number of partitions: expected {}, found {found}",
                        want.partitions
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok((tasks, to_create))
}

fn internal(info: &TopicInfo, partitions: i32) -> InternalTopic {
    InternalTopic {
        name: name(info),
        partitions,
        replication_factor: if info.replication_factor == 0 { -1 } else { info.replication_factor },
        configs: info.topic_configs.iter().map(|kv| (kv.key.to_string(), kv.value.to_string())).collect(),
    }
}

/// Kafka's `RepartitionTopics.setup`: fixed counts first, then each sink of a
/// subtopology whose inputs are all known gets their largest count, until none is left.
fn repartition_counts(
    topology: &Topology,
    existing: &dyn Fn(&str) -> Option<i32>,
) -> Result<BTreeMap<String, i32>, Failure> {
    let mut decided: BTreeMap<String, i32> = BTreeMap::new();
    for sub in &topology.subtopologies {
        for info in sub.repartition_source_topics.iter().filter(|i| i.partitions != 0) {
            decided.insert(name(info), info.partitions);
        }
    }
    loop {
        let mut needed = false;
        let mut progress = false;
        for sub in &topology.subtopologies {
            for sink in sub.repartition_sink_topics.iter().map(|t| t.0.to_string()) {
                if decided.contains_key(&sink) {
                    continue;
                }
                let from_repartition =
                    sub.repartition_source_topics.iter().filter_map(|i| decided.get(&name(i)).copied());
                let from_sources = sources(sub).filter_map(|t| existing(&t));
                match from_repartition.chain(from_sources).max() {
                    Some(n) => {
                        decided.insert(sink, n);
                        progress = true;
                    }
                    None => needed = true,
                }
            }
        }
        if !needed {
            break;
        }
        if !progress {
            return Err(Failure::Invalid(
                "Failed to compute number of partitions for all repartition topics. There may be loops in the \
                 topology that cannot be resolved."
                    .into(),
            ));
        }
    }
    let never_sized = topology
        .subtopologies
        .iter()
        .flat_map(|s| s.repartition_source_topics.iter())
        .any(|i| !decided.contains_key(&name(i)));
    if never_sized {
        return Err(Failure::Invalid(
            "Failed to compute number of partitions for all repartition topics, because a repartition source topic \
             is never used as a sink topic."
                .into(),
        ));
    }
    Ok(decided)
}

/// Kafka's `CopartitionedTopicsEnforcer`: the topics of a copartition group share
/// one partition count; repartition topics without a fixed count take it.
fn enforce_copartitioning(
    topology: &Topology,
    existing: &dyn Fn(&str) -> Option<i32>,
    decided: &mut BTreeMap<String, i32>,
) -> Result<(), Failure> {
    let fixed: BTreeSet<String> = topology
        .subtopologies
        .iter()
        .flat_map(|s| s.repartition_source_topics.iter().filter(|i| i.partitions != 0).map(name))
        .collect();
    let repartition: BTreeSet<String> =
        topology.subtopologies.iter().flat_map(|s| s.repartition_source_topics.iter().map(name)).collect();
    for sub in &topology.subtopologies {
        for group in &sub.copartition_groups {
            let members: BTreeSet<String> = group
                .source_topics
                .iter()
                .filter_map(|i| sub.source_topics.get(*i as usize).map(|t| t.0.to_string()))
                .chain(
                    group
                        .repartition_source_topics
                        .iter()
                        .filter_map(|i| sub.repartition_source_topics.get(*i as usize).map(name)),
                )
                .collect();
            if members.is_empty() {
                continue;
            }
            let count = |t: &String| existing(t).or_else(|| decided.get(t).copied()).unwrap_or(0);
            let internal: BTreeMap<String, i32> =
                members.iter().filter(|t| repartition.contains(*t)).map(|t| (t.clone(), count(t))).collect();
            let external: BTreeMap<String, i32> =
                members.iter().filter(|t| !repartition.contains(*t)).map(|t| (t.clone(), count(t))).collect();
            let not_same = |topics: &BTreeMap<String, i32>| {
                Failure::Status(
                    INCORRECTLY_PARTITIONED_TOPICS,
                    format!(
                        "Following topics do not have the same number of partitions: [{}]",
                        topics.iter().map(|(t, n)| format!("{t}={n}")).collect::<Vec<_>>().join(", ")
                    ),
                )
            };
            let n = if external.is_empty() {
                let fixed_here: Vec<i32> =
                    internal.iter().filter(|(t, _)| fixed.contains(*t)).map(|(_, n)| *n).collect();
                match fixed_here.first() {
                    Some(first) if fixed_here.iter().any(|n| n != first) => return Err(not_same(&internal)),
                    Some(first) => *first,
                    None => match internal.values().copied().max().unwrap_or(0) {
                        0 => {
                            return Err(Failure::Invalid(format!(
                                "All topics in the copartition group had undefined partition number: {:?}",
                                internal.keys().collect::<Vec<_>>()
                            )))
                        }
                        n => n,
                    },
                }
            } else {
                let first = *external.values().next().unwrap_or(&0);
                if external.values().any(|n| *n != first) {
                    return Err(not_same(&external));
                }
                first
            };
            for (topic, current) in internal {
                if fixed.contains(&topic) && current != n {
                    return Err(Failure::Status(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        format!(
                            "Number of partitions [{current}] of repartition topic [{topic}] doesn't match number of \
                             partitions [{n}] of the source topic."
                        ),
                    ));
                }
                decided.insert(topic, n);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::streams_group_heartbeat_request::CopartitionGroup;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn topic(name: &str) -> TopicName {
        TopicName(StrBytes::from_string(name.into()))
    }

    fn info(name: &str, partitions: i32) -> TopicInfo {
        TopicInfo::default().with_name(topic(name)).with_partitions(partitions)
    }

    /// The word count: subtopology 0 reads `input` and writes the repartition topic,
    /// subtopology 1 reads it and keeps a changelog.
    fn word_count() -> Topology {
        Topology::default().with_epoch(0).with_subtopologies(vec![
            Subtopology::default()
                .with_subtopology_id(StrBytes::from_static_str("0"))
                .with_source_topics(vec![topic("input")])
                .with_repartition_sink_topics(vec![topic("app-repartition")]),
            Subtopology::default()
                .with_subtopology_id(StrBytes::from_static_str("1"))
                .with_source_topics(vec![topic("app-repartition")])
                .with_repartition_source_topics(vec![info("app-repartition", 0)])
                .with_state_changelog_topics(vec![info("app-changelog", 0)]),
        ])
    }

    #[test]
    fn missing_sources_then_internal_topics_then_ready() {
        let topology = word_count();
        let none = configure(&topology, |_| None).unwrap();
        assert_eq!(none.problem, Some((MISSING_SOURCE_TOPICS, "Source topics input are missing.".into())));
        assert!(none.tasks.is_empty());

        let only_input = configure(&topology, |t| (t == "input").then_some(4)).unwrap();
        assert_eq!(only_input.problem.as_ref().map(|p| p.0), Some(MISSING_INTERNAL_TOPICS));
        let created: Vec<(&str, i32)> = only_input.to_create.iter().map(|t| (t.name.as_str(), t.partitions)).collect();
        assert_eq!(created, vec![("app-changelog", 4), ("app-repartition", 4)]);
        assert_eq!(only_input.tasks, BTreeMap::from([("0".into(), 4), ("1".into(), 4)]));

        let all = configure(&topology, |_| Some(4)).unwrap();
        assert!(all.ready());
        let wrong = configure(&topology, |t| Some(if t == "app-changelog" { 2 } else { 4 })).unwrap();
        assert_eq!(wrong.problem.map(|p| p.0), Some(INCORRECTLY_PARTITIONED_TOPICS));
    }

    #[test]
    fn copartitioned_sources_must_agree() {
        let topology = Topology::default().with_subtopologies(vec![Subtopology::default()
            .with_subtopology_id(StrBytes::from_static_str("0"))
            .with_source_topics(vec![topic("left"), topic("right")])
            .with_copartition_groups(vec![CopartitionGroup::default().with_source_topics(vec![0, 1])])]);
        let unequal = configure(&topology, |t| Some(if t == "left" { 3 } else { 2 })).unwrap();
        assert_eq!(
            unequal.problem,
            Some((
                INCORRECTLY_PARTITIONED_TOPICS,
                "Following topics do not have the same number of partitions: [left=3, right=2]".into()
            ))
        );
        assert!(configure(&topology, |_| Some(3)).unwrap().ready());
    }

    #[test]
    fn an_unsized_repartition_topic_is_an_invalid_topology() {
        let topology = Topology::default().with_subtopologies(vec![Subtopology::default()
            .with_subtopology_id(StrBytes::from_static_str("0"))
            .with_source_topics(vec![topic("r")])
            .with_repartition_source_topics(vec![info("r", 0)])]);
        let (code, _) = configure(&topology, |_| None).unwrap_err();
        assert_eq!(code, code::STREAMS_INVALID_TOPOLOGY);
        let changelog_sized = Topology::default().with_subtopologies(vec![Subtopology::default()
            .with_subtopology_id(StrBytes::from_static_str("0"))
            .with_state_changelog_topics(vec![info("c", 3)])]);
        assert_eq!(validate(&changelog_sized).unwrap_err().0, code::STREAMS_INVALID_TOPOLOGY);
    }
}
