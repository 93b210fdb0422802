//! The brokers' addresses as a shard gives them: to clients, on the listener each
//! client connected to; to other brokers, on the inter-broker listener.

use super::Shard;

impl Shard {
    /// This node's advertised address on listener `name`.
    fn own_endpoint(&self, name: &str) -> Option<(String, u16)> {
        self.settings.listeners.iter().find(|l| l.name == name).map(|l| (l.advertised_host.clone(), l.advertised_port))
    }

    /// The brokers a client on listener `listener` may reach: (id, host, port, rack)
    /// of each registered broker not fenced that has that listener, this node (when
    /// it is a broker) always with its current address. As in Kafka, a broker without
    /// the listener is left out.
    pub fn brokers(&self, listener: &str) -> Vec<(i32, String, u16, Option<String>)> {
        let image = self.image();
        let mut brokers: Vec<_> = image
            .brokers
            .values()
            .filter(|b| b.id != self.settings.node_id && !b.fenced)
            .filter_map(|b| b.endpoint(listener).map(|(host, port)| (b.id, host, port, b.rack.clone())))
            .collect();
        // A controller-only node is no broker.
        if self.settings.broker {
            if let Some((host, port)) = self.own_endpoint(listener) {
                brokers.push((self.settings.node_id, host, port, self.settings.rack.clone()));
            }
        }
        brokers.sort_by_key(|b| b.0);
        brokers
    }

    /// A broker's address for a client on listener `listener`: this node's own, or
    /// that of a registered broker not fenced.
    pub fn client_address(&self, id: i32, listener: &str) -> Option<(String, u16)> {
        if id == self.settings.node_id {
            return self.settings.broker.then(|| self.own_endpoint(listener)).flatten();
        }
        self.image().brokers.get(&id).filter(|b| !b.fenced).and_then(|b| b.endpoint(listener))
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
