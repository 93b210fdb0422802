//! Response bytes, counted against the connection's and the shard's budgets.
//!
//! A fetch response is built in memory before it is written, so a client asking for
//! 64 MiB responses and never reading them would hold that much per request. Every
//! response frame is therefore held against two budgets from the moment its bytes
//! exist until the connection's writer has handed them to the socket:
//!
//! - the connection's (`CONNECTION_RESPONSE_BYTES_MAX`): what one client can hold;
//! - the shard's (`SHARD_RESPONSE_BYTES_MAX`): what all clients of a shard can hold.
//!
//! A fetch takes a `Grant` *before* it reads, sized to what both budgets have left,
//! and reads no more than that (plus the first batch, which always goes). Once the
//! response is encoded the grant is settled to the frame's real size. Other responses
//! are held at their frame size without waiting: they are small and bounded by the
//! connection's in-flight requests.
//!
//! When the budgets are short, a connection that holds nothing gets a small grant
//! (`FETCH_GRANT_FLOOR`) at once, so readers always progress. A connection that still
//! holds unwritten responses waits until something is released: a client that never
//! reads stops at its own budget, and others keep being served. The connection takes
//! a fetch's grant before it reads the next request, so grants follow request order
//! (a later fetch never holds bytes that an earlier one, whose response is written
//! first, waits for), and a connection waiting for budget holds one decoded request.

use std::cell::Cell;
use std::rc::Rc;

use event_listener::Event;
use skein_control::limits::{CONNECTION_RESPONSE_BYTES_MAX, FETCH_GRANT_FLOOR, SHARD_RESPONSE_BYTES_MAX};

/// Response bytes held by all connections of one shard.
pub struct ShardResponses {
    capacity: usize,
    used: Cell<usize>,
    /// Fetches that waited for a grant.
    waits: Cell<u64>,
    /// Notified whenever bytes are released.
    released: Event,
}

impl Default for ShardResponses {
    fn default() -> Self {
        ShardResponses::new(SHARD_RESPONSE_BYTES_MAX)
    }
}

impl ShardResponses {
    pub fn new(capacity: usize) -> Self {
        ShardResponses { capacity, used: Cell::new(0), waits: Cell::new(0), released: Event::new() }
    }

    /// Response bytes held now, across the shard's connections.
    pub fn held(&self) -> usize {
        self.used.get()
    }

    /// Fetches that had to wait for response budget.
    pub fn waits(&self) -> u64 {
        self.waits.get()
    }
}

/// Response bytes held by one connection.
pub struct ConnectionResponses {
    shard: Rc<ShardResponses>,
    held: Cell<usize>,
}

impl ConnectionResponses {
    pub fn new(shard: Rc<ShardResponses>) -> Rc<Self> {
        Rc::new(ConnectionResponses { shard, held: Cell::new(0) })
    }

    /// Holds `bytes` of a response that is already built (no waiting).
    pub fn hold(self: &Rc<Self>, bytes: usize) -> Grant {
        let mut grant = Grant { connection: self.clone(), bytes: 0 };
        grant.add(bytes);
        grant
    }

    /// Grants a fetch up to `want` bytes: what both budgets have left, at least
    /// `FETCH_GRANT_FLOOR` (or `want` if smaller). Waits only while this connection
    /// holds unwritten responses and the budgets have less than the floor left.
    pub async fn grant(self: &Rc<Self>, want: usize) -> Grant {
        let floor = FETCH_GRANT_FLOOR.min(want);
        let mut waited = false;
        loop {
            let listener = self.shard.released.listen();
            let room = self.room(want);
            let bytes = if room >= floor {
                Some(room)
            } else if self.held.get() == 0 {
                // Holding nothing: this client reads what it is sent, so it gets the
                // floor even past the shard's budget (at most one floor per connection).
                Some(floor)
            } else {
                None
            };
            if let Some(bytes) = bytes {
                return self.hold(bytes);
            }
            if !waited {
                waited = true;
                self.shard.waits.set(self.shard.waits.get() + 1);
            }
            listener.await;
        }
    }

    /// What a grant could take now without waiting, up to `want`.
    fn room(&self, want: usize) -> usize {
        let connection = CONNECTION_RESPONSE_BYTES_MAX.saturating_sub(self.held.get());
        let shard = self.shard.capacity.saturating_sub(self.shard.used.get());
        want.min(connection).min(shard)
    }
}

/// Response bytes held against a connection's and its shard's budgets, released when
/// dropped (after the frame is written, or when the connection ends).
pub struct Grant {
    connection: Rc<ConnectionResponses>,
    bytes: usize,
}

impl Grant {
    /// The bytes granted.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Grows to up to `want` bytes with what the budgets have left now, never waiting.
    pub fn grow(&mut self, want: usize) {
        if want > self.bytes {
            let extra = self.connection.room(want - self.bytes);
            self.add(extra);
        }
    }

    /// Sets the grant to `bytes`, what the response really holds: the unused part is
    /// released; a response past its grant (a first batch larger than the grant) is
    /// held in full, past the budgets if need be.
    pub fn settle(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.add(bytes - self.bytes);
        } else {
            self.release(self.bytes - bytes);
        }
    }

    fn add(&mut self, bytes: usize) {
        let connection = &self.connection;
        connection.held.set(connection.held.get() + bytes);
        connection.shard.used.set(connection.shard.used.get() + bytes);
        self.bytes += bytes;
    }

    fn release(&mut self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let connection = &self.connection;
        connection.held.set(connection.held.get() - bytes);
        connection.shard.used.set(connection.shard.used.get() - bytes);
        self.bytes -= bytes;
        connection.shard.released.notify(usize::MAX);
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn run<F: std::future::Future<Output = ()> + 'static>(test: impl FnOnce() -> F + Send + 'static) {
        glommio::LocalExecutorBuilder::default().spawn(move || async move { test().await }).unwrap().join().unwrap();
    }

    // Grants come from what both budgets have left, and settle to the frame's size.
    #[test]
    fn grants_shrink_to_the_budgets_and_settle() {
        run(|| async {
            let shard = Rc::new(ShardResponses::new(8 << 20));
            let a = ConnectionResponses::new(shard.clone());
            let mut first = a.grant(64 << 20).await;
            assert_eq!(first.bytes(), CONNECTION_RESPONSE_BYTES_MAX.min(8 << 20));
            first.settle(1000);
            assert_eq!(shard.held(), 1000);
            let b = ConnectionResponses::new(shard.clone());
            let second = b.grant(64 << 20).await;
            assert_eq!(second.bytes(), (8 << 20) - 1000);
            // Nothing left, but the third connection holds nothing: it gets the floor.
            let c = ConnectionResponses::new(shard.clone());
            let third = c.grant(64 << 20).await;
            assert_eq!(third.bytes(), FETCH_GRANT_FLOOR);
            drop((first, second, third));
            assert_eq!(shard.held(), 0);
        });
    }

    // A connection holding unwritten responses waits for budget; the wait ends when
    // another connection releases what it held.
    #[test]
    fn holders_wait_for_a_release() {
        run(|| async {
            let shard = Rc::new(ShardResponses::new(4 << 20));
            let other = ConnectionResponses::new(shard.clone());
            let hog = other.hold(4 << 20);
            let connection = ConnectionResponses::new(shard.clone());
            let held = connection.hold(10);
            let waiting = glommio::spawn_local({
                let connection = connection.clone();
                async move { connection.grant(1 << 20).await }
            });
            glommio::timer::sleep(Duration::from_millis(5)).await;
            assert_eq!(shard.held(), (4 << 20) + 10, "nothing granted while the shard is full");
            assert_eq!(shard.waits(), 1);
            drop(hog);
            let granted = waiting.await;
            assert_eq!(granted.bytes(), 1 << 20);
            drop((held, granted));
            assert_eq!(shard.held(), 0);
        });
    }
}
