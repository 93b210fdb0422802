//! The brokers' addresses as a shard gives them: to clients, on the listener each
//! client connected to; to other brokers, on the inter-broker listener.

use super::Shard;

/// A broker as a client sees it: id, address on the client's listener, rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

impl Shard {
    /// This node's advertised address on listener `name`.
    fn own_endpoint(&self, name: &str) -> Option<(String, u16)> {
        self.settings.listeners.iter().find(|l| l.name == name).map(|l| (l.advertised_host.clone(), l.advertised_port))
    }

    /// The brokers a client on listener `listener` may reach: each registered broker
    /// not fenced that has that listener, this node (when it is a broker) always with
    /// its current address. As in Kafka, a broker without the listener is left out.
    pub fn brokers(&self, listener: &str) -> Vec<BrokerAddress> {
        let image = self.image();
        let mut brokers = Vec::new();
        for b in image.brokers.values().filter(|b| b.id != self.settings.node_id && !b.fenced) {
            let Some((host, port)) = b.endpoint(listener) else { continue };
            match b.virtual_on(listener) {
                // A broker that registered virtual brokers on this listener: each of
                // its shards a broker of its own.
                Some(v) => brokers.extend((0..v.shards).map(|shard| {
                    let id = skein_control::virtual_brokers::virtual_id(b.id, shard as usize);
                    BrokerAddress { id, host: host.clone(), port: v.port_base + shard, rack: b.rack.clone() }
                })),
                None => brokers.push(BrokerAddress { id: b.id, host, port, rack: b.rack.clone() }),
            }
        }
        // A controller-only node is no broker.
        if self.settings.broker {
            match (self.virtual_brokers(listener), self.own_endpoint(listener)) {
                // Each shard a broker of its own.
                (Some(port_base), Some((host, _))) => brokers.extend((0..self.settings.shards).map(|shard| {
                    let id = skein_control::virtual_brokers::virtual_id(self.settings.node_id, shard);
                    let port = port_base + shard as u16;
                    BrokerAddress { id, host: host.clone(), port, rack: self.settings.rack.clone() }
                })),
                (None, Some((host, port))) => {
                    let id = self.settings.node_id;
                    brokers.push(BrokerAddress { id, host, port, rack: self.settings.rack.clone() })
                }
                (_, None) => {}
            }
        }
        brokers.sort_by_key(|b| b.id);
        brokers
    }

    /// A broker's address for a client on listener `listener`: this node's own, or
    /// that of a registered broker not fenced.
    pub fn client_address(&self, id: i32, listener: &str) -> Option<(String, u16)> {
        if let Some((node, shard)) = skein_control::virtual_brokers::split(id) {
            if node == self.settings.node_id {
                let port_base = self.virtual_brokers(listener)?;
                let here = shard < self.settings.shards && self.settings.broker;
                return here.then(|| self.own_endpoint(listener).map(|(host, _)| (host, port_base + shard as u16)))?;
            }
            // Another node's virtual broker, as it registered them.
            let image = self.image();
            let broker = image.brokers.get(&node).filter(|b| !b.fenced)?;
            let v = broker.virtual_on(listener).filter(|v| shard < usize::from(v.shards))?;
            return broker.endpoint(listener).map(|(host, _)| (host, v.port_base + shard as u16));
        }
        if id == self.settings.node_id {
            return self.settings.broker.then(|| self.own_endpoint(listener)).flatten();
        }
        self.image().brokers.get(&id).filter(|b| !b.fenced).and_then(|b| b.endpoint(listener))
    }

    /// The base port of the virtual brokers clients on `listener` see, if they see any.
    fn virtual_brokers(&self, listener: &str) -> Option<u16> {
        self.settings.virtual_brokers.as_ref().filter(|v| v.listener == listener).map(|v| v.port_base)
    }

    /// The id a client on `listener` knows broker `broker` by where it acts for
    /// `topic`-`partition` (leads, follows, coordinates): a broker that runs virtual
    /// brokers on that listener (this node, or one that registered them) is the
    /// virtual broker of its shard that owns the partition; any other broker, and
    /// every broker on other listeners, keeps its id.
    pub fn client_broker_id(&self, broker: i32, listener: &str, topic: &str, partition: i32) -> i32 {
        let image = self.image();
        let shards = match broker == self.settings.node_id {
            true => self.virtual_brokers(listener).map(|_| self.settings.shards),
            false => image.brokers.get(&broker).and_then(|b| b.virtual_on(listener)).map(|v| usize::from(v.shards)),
        };
        let Some(shards) = shards else { return broker };
        let Some(owner) = image.shard_of(&skein_engine::TopicPartition::new(topic, partition)) else { return broker };
        // The shard table is the cluster's; a node with fewer shards places an entry
        // past its own within them (`MetadataImage::place_within`), and so does this.
        let owner = match owner < shards {
            true => owner,
            false => skein_control::metadata::default_shard(topic, partition, shards),
        };
        skein_control::virtual_brokers::virtual_id(broker, owner)
    }

    /// The controller's id as a client on `listener` knows it: when that node runs
    /// virtual brokers there, its shard 0's (every shard forwards to the controller).
    pub fn client_controller_id(&self, controller: i32, listener: &str) -> i32 {
        let virtual_here = match controller == self.settings.node_id {
            true => self.virtual_brokers(listener).is_some(),
            false => self.image().brokers.get(&controller).is_some_and(|b| b.virtual_on(listener).is_some()),
        };
        match virtual_here {
            true => skein_control::virtual_brokers::virtual_id(controller, 0),
            false => controller,
        }
    }

    /// A broker's address for another broker (the inter-broker listener): this
    /// node's own, or that of a registered broker not fenced.
    pub fn broker_address(&self, id: i32) -> Option<(String, u16)> {
        if id == self.settings.node_id && self.settings.broker {
            return Some((self.settings.advertised_host.clone(), self.settings.advertised_port));
        }
        self.image().brokers.get(&id).filter(|b| !b.fenced).map(|b| (b.host.clone(), b.port))
    }
}
