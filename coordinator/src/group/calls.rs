//! What the group coordinator is asked (`GroupCall`), each call a struct of its own
//! with its answer's type (`GroupRequest`): only the partition operation that carries
//! a call to its coordinator's shard holds the `GroupCall` and `GroupAnswer` unions.

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as ConsumerDescribedGroup;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::share_group_describe_response::DescribedGroup as ShareDescribedGroup;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, JoinGroupResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, SyncGroupResponse,
};

use super::{Committed, Join, PartitionOffset};

/// A typed call to the group coordinator: the `GroupCall` it travels as, and how its
/// answer comes back.
pub trait GroupRequest {
    type Reply;
    fn into_message(self) -> GroupCall;
    /// This call's answer; `None` for another call's (a broker bug, answered
    /// UNKNOWN_SERVER_ERROR by `topics::group_call`).
    fn reply(answer: GroupAnswer) -> Option<Self::Reply>;
}

#[derive(Debug)]
pub struct Sync {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    /// The member's `group.instance.id` (KIP-345), checked against the member id that
    /// instance holds now.
    pub instance_id: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug)]
pub struct Heartbeat {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    /// The member's `group.instance.id` (KIP-345), checked against the member id that
    /// instance holds now.
    pub instance_id: Option<String>,
}

/// LeaveGroup of `members` (member id, group instance id).
#[derive(Debug)]
pub struct Leave {
    pub group: String,
    pub members: Vec<(String, Option<String>)>,
}

#[derive(Debug)]
pub struct Commit {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    /// The member's `group.instance.id` (KIP-345), checked against the member id that
    /// instance holds now.
    pub instance_id: Option<String>,
    pub offsets: Vec<(String, i32, Committed)>,
}

/// OffsetFetch of `wanted` (all the group's partitions: `None`).
#[derive(Debug)]
pub struct Fetch {
    pub group: String,
    pub wanted: Option<Vec<(String, i32)>>,
    /// OffsetFetch v7+ (KIP-447): partitions with offsets of an open transaction
    /// answer UNSTABLE_OFFSET_COMMIT.
    pub require_stable: bool,
    /// OffsetFetch v9+ (KIP-848): the member asking, checked for consumer and streams
    /// groups; (None, -1) for a client that names none (the admin client).
    pub member: (Option<String>, i32),
}

/// TxnOffsetCommit: offsets of `producer_id`'s open transaction.
#[derive(Debug)]
pub struct TxnCommit {
    pub group: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub generation: i32,
    pub member_id: String,
    /// The member's `group.instance.id` (KIP-345), checked against the member id that
    /// instance holds now.
    pub instance_id: Option<String>,
    pub offsets: Vec<(String, i32, Committed)>,
}

#[derive(Debug)]
pub struct Describe {
    pub group: String,
}

/// ListGroups of this shard's groups in `states` (all: empty).
#[derive(Debug)]
pub struct List {
    pub states: Vec<String>,
}

#[derive(Debug)]
pub struct Delete {
    pub group: String,
}

#[derive(Debug)]
pub struct DeleteOffsets {
    pub group: String,
    pub partitions: Vec<(String, i32)>,
}

#[derive(Debug)]
pub struct ConsumerHeartbeat {
    pub request: Box<ConsumerGroupHeartbeatRequest>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug)]
pub struct ConsumerDescribe {
    pub group: String,
}

#[derive(Debug)]
pub struct StreamsHeartbeat {
    pub request: Box<kafka_protocol::messages::StreamsGroupHeartbeatRequest>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug)]
pub struct StreamsDescribe {
    pub group: String,
}

#[derive(Debug)]
pub struct ShareHeartbeat {
    pub request: Box<ShareGroupHeartbeatRequest>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug)]
pub struct ShareDescribe {
    pub group: String,
}

/// The share-partitions a share group has state for (`None`: the group is not a
/// share group, or does not exist), by topic: (topic id, name, partitions).
#[derive(Debug)]
pub struct ShareTopics {
    pub group: String,
}

/// Records that a share group has state for these topics' partitions (an
/// AlterShareGroupOffsets), creating the group if it does not exist. Refused with
/// NON_EMPTY_GROUP while it has members.
#[derive(Debug)]
pub struct ShareInitialize {
    pub group: String,
    pub topics: Vec<crate::group::records::InitializedTopic>,
}

/// Forgets a share group's state for `topics` (DeleteShareGroupOffsets): GROUP_ID_NOT_FOUND,
/// NON_EMPTY_GROUP, or the topics it had no state for.
#[derive(Debug)]
pub struct ShareForget {
    pub group: String,
    pub topics: Vec<uuid::Uuid>,
}

/// Answers NONE once the group's offsets partition is open and loaded (FindCoordinator
/// names a coordinator only then).
#[derive(Debug)]
pub struct Ready;

/// A streams heartbeat's answer and the internal topics its group needs created.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamsAnswer {
    pub response: kafka_protocol::messages::StreamsGroupHeartbeatResponse,
    pub create: Vec<crate::group::streams::topology::InternalTopic>,
}

/// A group operation, as it travels to the shard that owns the group's offsets
/// partition.
#[derive(Debug)]
pub enum GroupCall {
    Join(Box<Join>),
    Sync(Sync),
    Heartbeat(Heartbeat),
    Leave(Leave),
    Commit(Commit),
    Fetch(Fetch),
    TxnCommit(TxnCommit),
    Describe(Describe),
    List(List),
    Delete(Delete),
    DeleteOffsets(DeleteOffsets),
    ConsumerHeartbeat(ConsumerHeartbeat),
    ConsumerDescribe(ConsumerDescribe),
    StreamsHeartbeat(StreamsHeartbeat),
    StreamsDescribe(StreamsDescribe),
    ShareHeartbeat(ShareHeartbeat),
    ShareDescribe(ShareDescribe),
    ShareTopics(ShareTopics),
    ShareInitialize(ShareInitialize),
    ShareForget(ShareForget),
    Ready(Ready),
}

impl GroupCall {
    /// Whether the call may wait for a rebalance to complete before it is answered.
    pub fn waits(&self) -> bool {
        matches!(self, GroupCall::Join(_) | GroupCall::Sync(_))
    }
}

/// A group operation's answer, as it travels back.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupAnswer {
    Join(JoinGroupResponse),
    Sync(SyncGroupResponse),
    Code(i16),
    Codes(Vec<i16>),
    /// Committed offsets, with a partition error (UNSTABLE_OFFSET_COMMIT).
    Offsets(Vec<PartitionOffset>),
    Described(DescribedGroup),
    Listed(Vec<ListedGroup>),
    ConsumerHeartbeat(ConsumerGroupHeartbeatResponse),
    ConsumerDescribed(ConsumerDescribedGroup),
    /// The answer, and the internal topics the group needs created.
    StreamsHeartbeat(Box<StreamsAnswer>),
    StreamsDescribed(Box<kafka_protocol::messages::streams_group_describe_response::DescribedGroup>),
    ShareHeartbeat(ShareGroupHeartbeatResponse),
    ShareDescribed(ShareDescribedGroup),
    ShareTopics(Option<Vec<crate::group::records::InitializedTopic>>),
    /// A whole-call error, or the topics refused (UNKNOWN_TOPIC_OR_PARTITION).
    ShareForgotten(Result<Vec<uuid::Uuid>, i16>),
    /// A whole-call error, or a code per partition asked about.
    PartitionCodes(Result<Vec<i16>, i16>),
}

skein_control::typed_requests! {
    GroupRequest: GroupCall -> GroupAnswer {
        Sync => SyncGroupResponse = GroupAnswer::Sync(r) => r;
        Heartbeat => i16 = GroupAnswer::Code(r) => r;
        Leave => Vec<i16> = GroupAnswer::Codes(r) => r;
        Commit => Vec<i16> = GroupAnswer::Codes(r) => r;
        Fetch => Vec<PartitionOffset> = GroupAnswer::Offsets(r) => r;
        TxnCommit => Vec<i16> = GroupAnswer::Codes(r) => r;
        Describe => DescribedGroup = GroupAnswer::Described(r) => r;
        List => Vec<ListedGroup> = GroupAnswer::Listed(r) => r;
        Delete => i16 = GroupAnswer::Code(r) => r;
        DeleteOffsets => Result<Vec<i16>, i16> = GroupAnswer::PartitionCodes(r) => r;
        ConsumerHeartbeat => ConsumerGroupHeartbeatResponse = GroupAnswer::ConsumerHeartbeat(r) => r;
        ConsumerDescribe => ConsumerDescribedGroup = GroupAnswer::ConsumerDescribed(r) => r;
        StreamsHeartbeat => Box<StreamsAnswer> = GroupAnswer::StreamsHeartbeat(r) => r;
        StreamsDescribe => Box<kafka_protocol::messages::streams_group_describe_response::DescribedGroup> = GroupAnswer::StreamsDescribed(r) => r;
        ShareHeartbeat => ShareGroupHeartbeatResponse = GroupAnswer::ShareHeartbeat(r) => r;
        ShareDescribe => ShareDescribedGroup = GroupAnswer::ShareDescribed(r) => r;
        ShareTopics => Option<Vec<crate::group::records::InitializedTopic>> = GroupAnswer::ShareTopics(r) => r;
        ShareInitialize => i16 = GroupAnswer::Code(r) => r;
        ShareForget => Result<Vec<uuid::Uuid>, i16> = GroupAnswer::ShareForgotten(r) => r;
        Ready => i16 = GroupAnswer::Code(r) => r;
    }
}

impl GroupRequest for Join {
    type Reply = JoinGroupResponse;
    fn into_message(self) -> GroupCall {
        GroupCall::Join(Box::new(self))
    }
    fn reply(answer: GroupAnswer) -> Option<JoinGroupResponse> {
        match answer {
            GroupAnswer::Join(response) => Some(response),
            _ => None,
        }
    }
}
