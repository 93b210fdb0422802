//! DescribeCluster (KIP-700): this node, and the active controller.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 1 };

pub fn handle(shard: &Rc<Shard>, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let settings = &shard.settings;
    let mut response = DescribeClusterResponse::default();
    response.endpoint_type = request.endpoint_type;
    response.cluster_id = s(settings.cluster_id.clone());
    response.controller_id = BrokerId(settings.active_controller.load(std::sync::atomic::Ordering::Relaxed));
    let mut broker = DescribeClusterBroker::default();
    broker.broker_id = BrokerId(settings.node_id);
    broker.host = s(settings.advertised_host.clone());
    broker.port = settings.advertised_port as i32;
    response.brokers = vec![broker];
    response.cluster_authorized_operations = crate::operations::authorized(
        crate::operations::Resource::Cluster,
        request.include_cluster_authorized_operations,
    );
    response
}
