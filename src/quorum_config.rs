//! The controller quorum's flags: who votes first (`--controller-voters`, Kafka's
//! `controller.quorum.voters`; or KIP-853's `kafka-storage format` options,
//! `--initial-controllers` and `--standalone`), where a node finds the quorum instead
//! (`--controller-quorum-bootstrap-servers`, Kafka's
//! `controller.quorum.bootstrap.servers`), this node's roles (`process.roles`) and
//! where its controller listens.

use std::net::SocketAddr;

/// The flags as given (command line or config file).
#[derive(Debug, Default)]
pub struct QuorumFlags {
    pub voters: Option<String>,
    pub initial_controllers: Option<String>,
    pub standalone: bool,
    pub bootstrap_servers: Option<String>,
    pub controller_listener: Option<String>,
    pub roles: Option<String>,
}

/// The flags, checked against each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumConfig {
    /// The first voters with their controller addresses; empty for a single node, or
    /// for a node that asks `bootstrap_servers`.
    pub voters: Vec<(i32, SocketAddr)>,
    /// Controllers to ask for the voters (`metadata::bootstrap`).
    pub bootstrap_servers: Vec<SocketAddr>,
    /// This node's directory id, as `--initial-controllers` names it.
    pub directory_id: Option<String>,
    pub controller_listener: Option<SocketAddr>,
    pub roles: Roles,
}

impl QuorumConfig {
    /// Whether this node is one of a cluster rather than a single node.
    pub fn clustered(&self) -> bool {
        !self.voters.is_empty() || !self.bootstrap_servers.is_empty()
    }
}

/// Kafka's `process.roles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub broker: bool,
    pub controller: bool,
}

impl Roles {
    fn parse(text: &str) -> Result<Roles, String> {
        let mut roles = Roles { broker: false, controller: false };
        for role in text.split(',').map(str::trim) {
            match role {
                "broker" => roles.broker = true,
                "controller" => roles.controller = true,
                _ => return Err(format!("invalid --roles {text:?}: expected broker, controller or broker,controller")),
            }
        }
        Ok(roles)
    }
}

/// Checks node `node_id`'s quorum flags against each other.
pub fn resolve(node_id: i32, flags: QuorumFlags) -> Result<QuorumConfig, String> {
    let named = [flags.voters.is_some(), flags.initial_controllers.is_some(), flags.standalone];
    if named.iter().filter(|&&n| n).count() > 1 {
        return Err(
            "--controller-voters, --initial-controllers and --standalone each name the first voters: give one".into()
        );
    }
    let listener = match &flags.controller_listener {
        Some(text) => Some(
            text.parse::<SocketAddr>()
                .map_err(|_| format!("invalid --controller-listener {text:?}: expected host:port"))?,
        ),
        None => None,
    };
    let bootstrap_servers = match &flags.bootstrap_servers {
        Some(text) => parse_servers(text)?,
        None => Vec::new(),
    };
    if flags.voters.is_some() && !bootstrap_servers.is_empty() {
        return Err(
            "give --controller-voters (a quorum that starts with these voters) or --controller-quorum-bootstrap-servers, not both"
                .into(),
        );
    }
    let mut directory_id = None;
    let voters = if let Some(text) = &flags.voters {
        parse_voters(text, "--controller-voters", false)?.into_iter().map(|(id, at, _)| (id, at)).collect()
    } else if let Some(text) = &flags.initial_controllers {
        let parsed = parse_voters(text, "--initial-controllers", true)?;
        directory_id = parsed.iter().find(|(id, _, _)| *id == node_id).and_then(|(_, _, d)| d.clone());
        parsed.into_iter().map(|(id, at, _)| (id, at)).collect()
    } else if flags.standalone {
        let at =
            listener.ok_or("--standalone makes this node the quorum's first voter: it needs --controller-listener")?;
        vec![(node_id, at)]
    } else {
        Vec::new()
    };
    let single = voters.is_empty() && bootstrap_servers.is_empty();
    let voter = single || voters.iter().any(|(id, _)| *id == node_id);
    let controller_listener = listener.or_else(|| voters.iter().find(|(id, _)| *id == node_id).map(|(_, at)| *at));
    let roles = match &flags.roles {
        Some(text) => Roles::parse(text)?,
        // A node that finds the quorum through bootstrap servers and has a controller
        // listener is a controller waiting to be added.
        None => Roles { broker: true, controller: voter || (!single && listener.is_some()) },
    };
    match (voter, roles.controller) {
        (true, false) if single => return Err("a single node (no --controller-voters) needs --roles broker,controller".into()),
        (true, false) => {
            return Err(format!("node {node_id} is among the first voters, so its --roles must include controller"))
        }
        // A controller that joins the quorum later (AddRaftVoter) says where it listens.
        (false, true) if controller_listener.is_none() => {
            return Err(format!(
                "node {node_id} has the controller role but is not among the first voters: a controller that joins the quorum later needs --controller-listener"
            ))
        }
        _ => {}
    }
    if !roles.broker && single {
        return Err("a single node (no --controller-voters) needs --roles broker,controller".into());
    }
    if controller_listener.is_some() && !roles.controller {
        return Err("--controller-listener is for controllers: this node's --roles has no controller".into());
    }
    if controller_listener.is_some() && single {
        return Err(
            "--controller-listener needs --controller-voters, --initial-controllers, --standalone or --controller-quorum-bootstrap-servers"
                .into(),
        );
    }
    Ok(QuorumConfig { voters, bootstrap_servers, directory_id, controller_listener, roles })
}

/// How long a controller that already holds the metadata log asks the bootstrap
/// servers before it starts from the voters its own log names.
const ASK_BEFORE_OWN_LOG: std::time::Duration = std::time::Duration::from_secs(5);

/// Names the voters (and the cluster id) for a node given only
/// `--controller-quorum-bootstrap-servers`: asks each server in turn
/// (`metadata::bootstrap`) until one answers. A controller whose data directory holds
/// the metadata log already, and that no server answers for a few seconds (the whole
/// quorum restarting at once), starts from the voters its own log names. Blocking, for
/// the main thread; waits (logging) until `signal`.
pub fn find_quorum(
    config: &mut crate::config::NodeConfig,
    signal: &std::sync::atomic::AtomicBool,
) -> Result<(), String> {
    let servers = config.controller_quorum_bootstrap_servers.clone();
    if !config.controller_voters.is_empty() || servers.is_empty() {
        return Ok(());
    }
    // The voters this node's own log names, read once (and only when needed).
    let mut own_log = (config.roles.controller && config.data_dir.join("__skein_metadata").is_dir()).then_some(None);
    let started = std::time::Instant::now();
    for attempt in 0usize.. {
        if signal.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("stopped before a controller of --controller-quorum-bootstrap-servers answered".into());
        }
        let server = servers[attempt % servers.len()];
        match skein_control::metadata::bootstrap::ask(server, &config.security) {
            Ok(found) => {
                if let Some(given) = config.cluster_id.as_ref().filter(|given| **given != found.cluster_id) {
                    return Err(format!(
                        "the controller at {server} belongs to cluster {}, not --cluster-id {given}",
                        found.cluster_id
                    ));
                }
                tracing::info!(target: "skein", %server, voters = ?found.voters, "found the controller quorum");
                config.cluster_id = Some(found.cluster_id);
                config.controller_voters = found.voters;
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(format!("the controller at {server} answered with no quorum: {e}"));
            }
            Err(e) => {
                if let Some(recorded) = own_log.as_mut().filter(|_| started.elapsed() >= ASK_BEFORE_OWN_LOG) {
                    if recorded.is_none() {
                        let opened = skein_control::metadata::log::open(&config.data_dir, config.node_id, &[], 1)?;
                        *recorded = Some(opened.recorded_voters());
                    }
                    let voters = recorded.clone().unwrap_or_default();
                    if !voters.is_empty() {
                        tracing::info!(target: "skein", ?voters, "no bootstrap server answers: starting from the voters this node's metadata log names");
                        config.controller_voters = voters;
                        return Ok(());
                    }
                }
                if (attempt + 1).is_multiple_of(servers.len()) {
                    tracing::warn!(target: "skein", error = %e, "no controller of --controller-quorum-bootstrap-servers answers yet; retrying");
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    }
    unreachable!("the loop returns")
}

/// This node as the quorum records a member (`QuorumMember`): its controller
/// listener and the directory id of its meta.properties; none for a node that is no
/// controller.
pub fn member(config: &crate::config::NodeConfig, directory_id: &str) -> Option<skein_control::metadata::QuorumMember> {
    use base64::Engine as _;
    let listener = config.controller_listener.filter(|_| config.roles.controller)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(directory_id).ok()?;
    Some(skein_control::metadata::QuorumMember {
        node: config.node_id,
        directory_id: uuid::Uuid::from_slice(&bytes).ok()?,
        host: listener.ip().to_string(),
        port: listener.port(),
        voter: true,
    })
}

/// Parses Kafka's `controller.quorum.voters` (`id@host:port` separated by commas) or,
/// `with_directories`, `kafka-storage format --initial-controllers`
/// (`id@host:port:directory-id`, the directory id as Kafka prints a Uuid).
fn parse_voters(
    text: &str,
    flag: &str,
    with_directories: bool,
) -> Result<Vec<(i32, SocketAddr, Option<String>)>, String> {
    let mut voters: Vec<(i32, SocketAddr, Option<String>)> = Vec::new();
    let form = match with_directories {
        true => "id@host:port:directory-id, e.g. 1@127.0.0.1:9093:pbvuBlaTTwKRxS5NLJwRFQ",
        false => "id@host:port, e.g. 1@127.0.0.1:9093",
    };
    for voter in text.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let bad = || format!("invalid {flag} entry {voter:?}: expected {form}");
        let (id, rest) = voter.split_once('@').ok_or_else(bad)?;
        let id: i32 = id.parse().ok().filter(|id| *id >= 0).ok_or_else(bad)?;
        let (address, directory) = match with_directories {
            true => {
                let (address, directory) = rest.rsplit_once(':').ok_or_else(bad)?;
                if !directory_id_valid(directory) {
                    return Err(format!("invalid {flag} entry {voter:?}: {directory:?} is not a directory id"));
                }
                (address, Some(directory.to_owned()))
            }
            false => (rest, None),
        };
        let address: SocketAddr = address.parse().map_err(|_| bad())?;
        if voters.iter().any(|(other, _, _)| *other == id) {
            return Err(format!("invalid {flag}: node {id} is listed twice"));
        }
        voters.push((id, address, directory));
    }
    if voters.is_empty() {
        return Err(format!("invalid {flag}: no voter"));
    }
    Ok(voters)
}

/// A directory id as Kafka writes it: 16 bytes in URL-safe base64 without padding.
pub fn directory_id_valid(text: &str) -> bool {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).is_ok_and(|bytes| bytes.len() == 16)
}

/// Parses `host:port` separated by commas.
fn parse_servers(text: &str) -> Result<Vec<SocketAddr>, String> {
    let servers = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<SocketAddr>().map_err(|_| {
                format!("invalid --controller-quorum-bootstrap-servers entry {s:?}: expected host:port, e.g. 127.0.0.1:9093")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if servers.is_empty() {
        return Err("invalid --controller-quorum-bootstrap-servers: no server".into());
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(voters: Option<&str>, roles: Option<&str>) -> QuorumFlags {
        QuorumFlags { voters: voters.map(str::to_string), roles: roles.map(str::to_string), ..Default::default() }
    }

    // Kafka's process.roles: a voter is a controller (with the broker role by
    // default), any other node a broker-only observer; contradictions are named.
    #[test]
    fn roles() {
        let voters = Some("1@127.0.0.1:19093,2@127.0.0.1:29093");
        let roles = |id, text| resolve(id, flags(voters, text)).map(|c| (c.roles.broker, c.roles.controller));
        assert_eq!(roles(1, None), Ok((true, true)));
        assert_eq!(roles(1, Some("controller")), Ok((false, true)));
        assert_eq!(roles(3, None), Ok((true, false)));
        assert_eq!(roles(3, Some("broker")), Ok((true, false)));
        assert_eq!(resolve(3, flags(voters, None)).unwrap().controller_listener, None);
        let refused = |id, text: &str, needle: &str| {
            let e = resolve(id, flags(voters, Some(text))).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        refused(1, "broker", "must include controller");
        refused(3, "broker,controller", "not among the first voters");
        refused(3, "leader", "expected broker, controller or broker,controller");
        let lone = resolve(1, flags(None, Some("broker"))).unwrap_err();
        assert!(lone.contains("needs --roles broker,controller"), "{lone}");
        // A controller that joins the quorum later says where it listens.
        let joining = resolve(
            3,
            QuorumFlags {
                controller_listener: Some("127.0.0.1:39093".into()),
                ..flags(voters, Some("broker,controller"))
            },
        )
        .unwrap();
        assert_eq!((joining.roles.controller, joining.controller_listener.map(|a| a.port())), (true, Some(39093)));
    }

    // KIP-853's ways to start a quorum: --standalone (this node alone),
    // --initial-controllers (with directory ids), and a node that asks the quorum
    // through bootstrap servers (a controller when it has a listener).
    #[test]
    fn dynamic_quorums() {
        let listener = Some("127.0.0.1:19093".to_string());
        let standalone =
            resolve(1, QuorumFlags { standalone: true, controller_listener: listener.clone(), ..Default::default() })
                .unwrap();
        assert_eq!(standalone.voters, vec![(1, "127.0.0.1:19093".parse().unwrap())]);
        assert_eq!(standalone.roles, Roles { broker: true, controller: true });
        let e = resolve(1, QuorumFlags { standalone: true, ..Default::default() }).unwrap_err();
        assert!(e.contains("needs --controller-listener"), "{e}");
        let both = QuorumFlags { standalone: true, ..flags(Some("1@127.0.0.1:19093"), None) };
        assert!(resolve(1, both).unwrap_err().contains("give one"));

        let initial = "1@127.0.0.1:19093:pbvuBlaTTwKRxS5NLJwRFQ,2@127.0.0.1:29093:Q9cK0kGqQ-WSs3JS1H9sRw";
        let first = |id| resolve(id, QuorumFlags { initial_controllers: Some(initial.into()), ..Default::default() });
        let two = first(2).unwrap();
        assert_eq!(two.directory_id.as_deref(), Some("Q9cK0kGqQ-WSs3JS1H9sRw"));
        assert_eq!(two.voters.len(), 2);
        assert_eq!(two.controller_listener.map(|a| a.port()), Some(29093));
        let bad = QuorumFlags { initial_controllers: Some("1@127.0.0.1:19093:short".into()), ..Default::default() };
        assert!(resolve(1, bad).unwrap_err().contains("not a directory id"));
        let no_directory = QuorumFlags { initial_controllers: Some("1@127.0.0.1:19093".into()), ..Default::default() };
        assert!(resolve(1, no_directory).is_err());

        let bootstrap = Some("127.0.0.1:19093,127.0.0.1:29093".to_string());
        let joiner = resolve(
            3,
            QuorumFlags {
                bootstrap_servers: bootstrap.clone(),
                controller_listener: Some("127.0.0.1:39093".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(joiner.voters.is_empty() && joiner.clustered());
        assert_eq!((joiner.roles.broker, joiner.roles.controller), (true, true));
        let broker = resolve(4, QuorumFlags { bootstrap_servers: bootstrap.clone(), ..Default::default() }).unwrap();
        assert_eq!((broker.roles.broker, broker.roles.controller), (true, false));
        let both = QuorumFlags { bootstrap_servers: bootstrap, ..flags(Some("1@127.0.0.1:19093"), None) };
        assert!(resolve(1, both).unwrap_err().contains("not both"));
        let garbled = QuorumFlags { bootstrap_servers: Some("nowhere".into()), ..Default::default() };
        assert!(resolve(1, garbled).unwrap_err().contains("expected host:port"));
    }
}
