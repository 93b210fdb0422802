//! Finding the quorum from `--controller-quorum-bootstrap-servers` (Kafka's
//! `controller.quorum.bootstrap.servers`, KIP-853): a node that knows only where some
//! controllers listen asks one of them (`DESCRIBE` as the first frame on its
//! controller listener) for the cluster id and the voters with their endpoints, then
//! starts as if it had been given them as `--controller-voters`. The answer names the
//! voters of the configuration the answering controller holds, each at the endpoint
//! the log records for it (`QuorumMember`, which every controller records for itself:
//! `quorum::announce`) or, before that, where its `--controller-voters` put it.

use std::io::Write as _;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::host::Host;
use super::transport::{frame, invalid, read_frame, DESCRIBE, DESCRIBE_REPLY};
use crate::security::Security;

/// A controller's answer: the cluster it belongs to and the quorum's voters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bootstrap {
    pub cluster_id: String,
    pub voters: Vec<(i32, SocketAddr)>,
}

/// The quorum as this controller holds it. Voters whose endpoint nobody recorded
/// yet are left out (a voter finds them again once they announce themselves).
pub fn describe<H: Host>(host: &H) -> Bootstrap {
    let image = host.image();
    let voters = host.controller().map(|c| c.voters()).unwrap_or_default();
    let voters =
        voters.into_iter().filter_map(|node| Some((node, image.controller_address(node, host.voters())?))).collect();
    Bootstrap { cluster_id: host.cluster_id().to_owned(), voters }
}

/// Answers a `DESCRIBE` on a controller connection.
pub(super) fn answer<H: Host>(host: &H) -> Vec<u8> {
    frame(DESCRIBE_REPLY, &serde_json::to_vec(&describe(host)).expect("a bootstrap answer always serialises"))
}

/// Asks the controller at `address` for the quorum. Blocking: for the main thread,
/// before the shards start.
///
/// # Errors
/// The connection's error, or `InvalidData` for an answer that is not one.
pub fn ask(address: SocketAddr, security: &Security) -> std::io::Result<Bootstrap> {
    let mut stream = super::observer::connect_blocking(address, security)?;
    stream.write_all(&frame(DESCRIBE, &[]))?;
    stream.flush()?;
    let mut reader = futures_lite::io::AssertAsync::new(&mut stream);
    let (kind, payload) = futures_lite::future::block_on(read_frame(&mut reader))?;
    if kind != DESCRIBE_REPLY {
        return Err(invalid("unexpected frame from the controller"));
    }
    let answer: Bootstrap = serde_json::from_slice(&payload).map_err(|_| invalid("bootstrap answer"))?;
    if answer.voters.is_empty() {
        // A controller that holds no configuration yet (itself still joining).
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "the controller knows no voters yet"));
    }
    Ok(answer)
}
