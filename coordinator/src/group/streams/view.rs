//! What a streams group shows: StreamsGroupDescribe's view of it, and the endpoints
//! with their partitions that heartbeats hand out for interactive queries.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::streams_group_describe_response as describe;
use kafka_protocol::messages::streams_group_heartbeat_request::{self as req, Topology};
use kafka_protocol::messages::streams_group_heartbeat_response as resp;
use kafka_protocol::messages::{GroupId, TopicName};
use skein_control::metadata::MetadataImage;

use super::assign::{TaskSet, Tasks};
use super::{s, topology, StreamsGroup};

impl StreamsGroup {
    /// Every member's endpoint with the partitions of its tasks, for interactive queries.
    pub(super) fn endpoints(&self, image: &MetadataImage) -> Vec<resp::EndpointToPartitions> {
        let Some(topology) = &self.topology else { return Vec::new() };
        let partitions = |set: &TaskSet| {
            let mut by_topic: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
            for sub in &topology.subtopologies {
                let Some(parts) = set.get(sub.subtopology_id.as_str()) else { continue };
                for topic in topology::input_topics(sub) {
                    let count = image.topic(&topic).map_or(0, |t| t.partitions);
                    by_topic.entry(topic).or_default().extend(parts.iter().filter(|p| **p < count));
                }
            }
            by_topic
                .into_iter()
                .filter(|(_, p)| !p.is_empty())
                .map(|(t, p)| {
                    resp::TopicPartition::default().with_topic(TopicName(s(t))).with_partitions(p.into_iter().collect())
                })
                .collect::<Vec<_>>()
        };
        self.members
            .values()
            .filter_map(|m| {
                let (host, port) = m.endpoint.clone()?;
                let mut replicas = m.progress.assigned.standby.clone();
                for (sub, parts) in &m.progress.assigned.warmup {
                    replicas.entry(sub.clone()).or_default().extend(parts);
                }
                Some(
                    resp::EndpointToPartitions::default()
                        .with_user_endpoint(resp::Endpoint::default().with_host(s(host)).with_port(port))
                        .with_active_partitions(partitions(&m.progress.assigned.active))
                        .with_standby_partitions(partitions(&replicas)),
                )
            })
            .collect()
    }

    pub fn describe(&self) -> describe::DescribedGroup {
        let tasks = |t: &Tasks| {
            let ids = |set: &TaskSet| {
                set.iter()
                    .map(|(sub, p)| {
                        describe::TaskIds::default()
                            .with_subtopology_id(s(sub.clone()))
                            .with_partitions(p.iter().copied().collect())
                    })
                    .collect()
            };
            describe::Assignment::default()
                .with_active_tasks(ids(&t.active))
                .with_standby_tasks(ids(&t.standby))
                .with_warmup_tasks(ids(&t.warmup))
        };
        let empty = Tasks::default();
        let members = self
            .members
            .values()
            .map(|m| {
                describe::Member::default()
                    .with_member_id(s(m.id.clone()))
                    .with_member_epoch(m.progress.epoch)
                    .with_instance_id(m.instance_id.clone().map(s))
                    .with_rack_id(m.rack_id.clone().map(s))
                    .with_client_id(s(m.client_id.clone()))
                    .with_client_host(s(m.client_host.clone()))
                    .with_topology_epoch(m.topology_epoch)
                    .with_process_id(s(m.process_id.clone()))
                    .with_user_endpoint(
                        m.endpoint.clone().map(|(h, p)| describe::Endpoint::default().with_host(s(h)).with_port(p)),
                    )
                    .with_client_tags(
                        m.client_tags
                            .iter()
                            .map(|(k, v)| describe::KeyValue::default().with_key(s(k.clone())).with_value(s(v.clone())))
                            .collect(),
                    )
                    .with_assignment(tasks(&m.progress.assigned))
                    .with_target_assignment(tasks(self.target.get(&m.id).unwrap_or(&empty)))
            })
            .collect();
        describe::DescribedGroup::default()
            .with_group_id(GroupId(s(self.id.clone())))
            .with_group_state(s(self.state()))
            .with_group_epoch(self.epoch)
            .with_assignment_epoch(self.assignment_epoch)
            .with_topology(self.topology.as_ref().map(|t| self.describe_topology(t)))
            .with_members(members)
            .with_assignor_name(Some(s("sticky")))
    }

    /// The topology as StreamsGroupDescribe shows it, internal topics with the
    /// partition counts the configuration decided.
    fn describe_topology(&self, topology: &Topology) -> describe::Topology {
        let decided: BTreeMap<&str, i32> =
            self.configured.iter().flat_map(|c| c.to_create.iter().map(|t| (t.name.as_str(), t.partitions))).collect();
        let info = |i: &req::TopicInfo| {
            let partitions =
                if i.partitions != 0 { i.partitions } else { decided.get(i.name.as_str()).copied().unwrap_or(0) };
            describe::TopicInfo::default()
                .with_name(i.name.clone())
                .with_partitions(partitions)
                .with_replication_factor(i.replication_factor)
                .with_topic_configs(
                    i.topic_configs
                        .iter()
                        .map(|kv| describe::KeyValue::default().with_key(kv.key.clone()).with_value(kv.value.clone()))
                        .collect(),
                )
        };
        let sorted = |mut names: Vec<TopicName>| {
            names.sort();
            names
        };
        let subtopologies = topology
            .subtopologies
            .iter()
            .map(|sub| {
                describe::Subtopology::default()
                    .with_subtopology_id(sub.subtopology_id.clone())
                    .with_source_topics(sorted(sub.source_topics.clone()))
                    .with_repartition_sink_topics(sorted(sub.repartition_sink_topics.clone()))
                    .with_state_changelog_topics(sub.state_changelog_topics.iter().map(info).collect())
                    .with_repartition_source_topics(sub.repartition_source_topics.iter().map(info).collect())
            })
            .collect();
        describe::Topology::default().with_epoch(topology.epoch).with_subtopologies(Some(subtopologies))
    }
}
