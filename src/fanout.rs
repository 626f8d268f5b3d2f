//! Live delivery of new events to open subscriptions.
//!
//! Owns the registry of connections and their subscriptions. Each connection registers a bounded
//! queue; [`Fanout::publish`] serializes nothing (the event JSON is shared) and never blocks: a
//! connection whose queue is full is cut off (its `slow` token is cancelled) and counted, so one
//! client that stops reading cannot hold up the others or grow memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{Event, Filter, RelayMessage};

/// Identifies one connection for its lifetime.
pub type ConnId = u64;

struct Entry {
    tx: mpsc::Sender<RelayMessage>,
    slow: CancellationToken,
    subs: HashMap<String, Arc<Vec<Filter>>>,
}

/// The subscription registry shared by every connection.
#[derive(Default)]
pub struct Fanout {
    conns: RwLock<HashMap<ConnId, Entry>>,
    next_id: AtomicU64,
    subscriptions: AtomicU64,
}

/// A connection's registration: dropping it unregisters the connection.
pub struct Registration {
    fanout: Arc<Fanout>,
    /// This connection's id.
    pub id: ConnId,
    /// Live events for this connection.
    pub rx: mpsc::Receiver<RelayMessage>,
    /// Cancelled when the connection fell behind and must be closed.
    pub slow: CancellationToken,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let removed = self.fanout.conns.write().ok().and_then(|mut c| c.remove(&self.id));
        if let Some(entry) = removed {
            self.fanout.subscriptions.fetch_sub(entry.subs.len() as u64, Ordering::Relaxed);
        }
    }
}

impl Fanout {
    /// Registers a connection with an outbound queue of `capacity` live events.
    pub fn register(self: &Arc<Self>, capacity: usize) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let slow = CancellationToken::new();
        if let Ok(mut conns) = self.conns.write() {
            conns.insert(id, Entry { tx, slow: slow.clone(), subs: HashMap::new() });
        }
        Registration { fanout: self.clone(), id, rx, slow }
    }

    /// Adds or replaces subscription `sub_id` of connection `conn`.
    pub fn subscribe(&self, conn: ConnId, sub_id: &str, filters: Vec<Filter>) {
        if let Ok(mut conns) = self.conns.write()
            && let Some(entry) = conns.get_mut(&conn)
            && entry.subs.insert(sub_id.to_string(), Arc::new(filters)).is_none()
        {
            self.subscriptions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes subscription `sub_id` of connection `conn`; true when it existed.
    pub fn unsubscribe(&self, conn: ConnId, sub_id: &str) -> bool {
        let removed = self
            .conns
            .write()
            .ok()
            .and_then(|mut conns| conns.get_mut(&conn).and_then(|e| e.subs.remove(sub_id)))
            .is_some();
        if removed {
            self.subscriptions.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Open subscriptions of connection `conn`.
    pub fn subscription_count(&self, conn: ConnId) -> usize {
        self.conns.read().ok().and_then(|c| c.get(&conn).map(|e| e.subs.len())).unwrap_or(0)
    }

    /// Open subscriptions on the whole relay.
    pub fn total_subscriptions(&self) -> u64 {
        self.subscriptions.load(Ordering::Relaxed)
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.read().map(|c| c.len()).unwrap_or(0)
    }

    /// Delivers `event` (serialized once as `json`) to every matching subscription, once each.
    pub fn publish(&self, event: &Event, json: &Arc<RawValue>) {
        let Ok(conns) = self.conns.read() else { return };
        for entry in conns.values() {
            if entry.slow.is_cancelled() {
                continue;
            }
            for (sub_id, filters) in &entry.subs {
                if !filters.iter().any(|f| f.matches(event)) {
                    continue;
                }
                let frame = RelayMessage::Event { sub_id: sub_id.clone(), event: json.clone() };
                if entry.tx.try_send(frame).is_err() {
                    // Full (or closing): cut the connection off rather than queue without bound.
                    entry.slow.cancel();
                    metrics::counter!("hearth_slow_consumers_total").increment(1);
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Keys, Kind, Timestamp};

    fn event() -> (Event, Arc<RawValue>) {
        let e = Keys::from_bytes([5; 32]).unwrap().sign(Timestamp(1), Kind(1), vec![], "x");
        let json: Arc<RawValue> = RawValue::from_string(e.to_json()).unwrap().into();
        (e, json)
    }

    #[test]
    fn matching_subscriptions_get_the_event_once_each() {
        let fanout = Arc::new(Fanout::default());
        let mut a = fanout.register(8);
        let mut b = fanout.register(8);
        fanout.subscribe(a.id, "s1", vec![serde_json::from_str(r#"{"kinds":[1]}"#).unwrap()]);
        fanout.subscribe(a.id, "s2", vec![serde_json::from_str(r#"{"kinds":[2]}"#).unwrap()]);
        fanout.subscribe(b.id, "s1", vec![serde_json::from_str("{}").unwrap(), serde_json::from_str("{}").unwrap()]);
        let (e, json) = event();
        fanout.publish(&e, &json);
        assert!(matches!(a.rx.try_recv(), Ok(RelayMessage::Event { sub_id, .. }) if sub_id == "s1"));
        assert!(a.rx.try_recv().is_err());
        assert!(b.rx.try_recv().is_ok());
        assert!(b.rx.try_recv().is_err());
        assert_eq!(fanout.total_subscriptions(), 3);
        drop(a);
        assert_eq!(fanout.total_subscriptions(), 1);
    }

    #[test]
    fn a_full_queue_cuts_the_connection_off() {
        let fanout = Arc::new(Fanout::default());
        let reg = fanout.register(1);
        fanout.subscribe(reg.id, "s", vec![serde_json::from_str("{}").unwrap()]);
        let (e, json) = event();
        fanout.publish(&e, &json);
        assert!(!reg.slow.is_cancelled());
        fanout.publish(&e, &json);
        assert!(reg.slow.is_cancelled());
    }
}
