//! DeleteGroups: removes empty groups and their committed offsets (tombstones); a
//! share group's share-partition states too, at their share coordinators. v3's
//! per-group message is left null, as Kafka 4.4 leaves it but for the topology
//! descriptions of KIP-1331, which Skein does not keep.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
use kafka_protocol::protocol::VersionRange;
use skein_coordinator::group::calls;

use crate::shard::Shard;

pub const VERSIONS: VersionRange = VersionRange { min: 0, max: 3 };

pub async fn handle(
    shard: &Rc<Shard>,
    request: DeleteGroupsRequest,
    caller: &crate::authorize::Caller,
) -> DeleteGroupsResponse {
    let mut response = DeleteGroupsResponse::default();
    for group in request.groups_names {
        let name = group.0.to_string();
        if !caller.group(crate::authorize::Op::Delete, &name) {
            let denied = crate::authorize::GROUP_AUTHORIZATION_FAILED;
            response.results.push(DeletableGroupResult::default().with_group_id(group).with_error_code(denied));
            continue;
        }
        let share = crate::topics::group_call(shard, &name, calls::ShareTopics { group: name.clone() }).await;
        let mut error = crate::topics::group_call(shard, &name, calls::Delete { group: name.clone() })
            .await
            .unwrap_or_else(|error| error);
        if let (skein_control::errors::code::NONE, Ok(Some(topics))) = (error, share) {
            for (topic_id, _, partitions) in topics {
                for partition in partitions {
                    let key = skein_coordinator::serve::share::Key { group: name.clone(), topic_id, partition };
                    let delete = skein_coordinator::serve::share::StateCall::Delete { key };
                    if let Err((c, _)) = shard.share_state(delete).await {
                        error = c;
                    }
                }
            }
        }
        response.results.push(DeletableGroupResult::default().with_group_id(group).with_error_code(error));
    }
    response
}
