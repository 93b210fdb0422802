//! Share groups (KIP-932): the state a partition's leader keeps for each share group
//! consuming it (`partition`). The share group coordinator, ShareFetch and
//! ShareAcknowledge, and the persistence of this state to `__share_group_state` are
//! built on it; until they are, no share-group API is advertised.

pub mod partition;
