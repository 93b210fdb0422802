//! DescribeCluster (KIP-700): the live brokers, and the active controller; from v2
//! (KIP-1073), on request, the fenced brokers too, marked as such.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::VersionRange;

use super::s;
use crate::shard::{BrokerAddress, Shard};

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 2 };

pub fn handle(
    shard: &Rc<Shard>,
    request: DescribeClusterRequest,
    listener: &str,
    caller: &crate::authorize::Caller,
) -> DescribeClusterResponse {
    let settings = &shard.settings;
    let mut response = DescribeClusterResponse::default();
    response.endpoint_type = request.endpoint_type;
    response.cluster_id = s(settings.cluster_id.clone());
    let controller = settings.active_controller.load(std::sync::atomic::Ordering::Relaxed);
    response.controller_id = BrokerId(shard.client_controller_id(controller, listener));
    response.brokers = shard
        .brokers(listener)
        .into_iter()
        .map(|BrokerAddress { id, host, port, rack }| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(s(host))
                .with_port(i32::from(port))
                .with_rack(rack.map(s))
        })
        .collect();
    if request.include_fenced_brokers {
        let image = shard.image();
        for b in image.brokers.values().filter(|b| b.fenced) {
            let Some((host, port)) = b.endpoint(listener) else { continue };
            response.brokers.push(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(s(host))
                    .with_port(i32::from(port))
                    .with_rack(b.rack.clone().map(s))
                    .with_is_fenced(true),
            );
        }
        response.brokers.sort_by_key(|b| b.broker_id.0);
    }
    response.cluster_authorized_operations = crate::operations::authorized(
        caller,
        crate::operations::Resource::Cluster,
        "",
        request.include_cluster_authorized_operations,
    );
    response
}
