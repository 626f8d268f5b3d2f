//! Live delivery of new events to open subscriptions.
//!
//! Subscriptions confined to groups (`#h` in every filter) are indexed by them ([`index`]), so an
//! event of one group is matched against its group's subscriptions and the general ones only.
//!
//! Owns the registry of connections and their subscriptions. Each connection registers a bounded
//! queue; [`Fanout::publish`] serializes nothing (the event JSON is shared) and never blocks: a
//! connection whose queue is full is cut off (its `slow` token is cancelled) and counted, so one
//! client that stops reading cannot hold up the others or grow memory. A queue holds memory only
//! while frames wait in it: an idle connection (most of them, on a public relay) costs its
//! registry entry and nothing more.

use std::cell::OnceCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::limiter::Principal;
use crate::protocol::{Event, EventJson, Filter, PrivateKinds, PubKey, RelayMessage};
use crate::store::Mark;
use index::Index;

mod index;

/// Identifies one connection for its lifetime.
pub type ConnId = u64;

/// Frames kept in a drained queue's buffer; a larger one (left by a burst) is given back.
const KEPT_CAPACITY: usize = 16;

/// One connection's live frames, waiting to be written.
struct Outbox {
    queue: Mutex<Queue>,
    /// Woken when a frame is queued.
    ready: Notify,
    /// Frames and bytes the queue may hold.
    capacity: usize,
    max_bytes: usize,
}

/// A live event for one subscription, with what its connection needs to tell whether the
/// subscription's own query already sent it (see `ws::session`).
#[derive(Debug)]
pub struct Live {
    /// The subscription it matched.
    pub sub_id: String,
    /// The event.
    pub event: EventJson,
    /// The generation of the subscription it matched.
    pub generation: u64,
    /// Where its event became visible in the store; `None` for an event never stored
    /// (ephemeral), which no query can have sent.
    pub mark: Option<Mark>,
}

#[derive(Default)]
struct Queue {
    frames: VecDeque<Live>,
    /// Bytes of live frames queued and not yet written (see [`Registration::written`]).
    bytes: usize,
}

impl Outbox {
    /// The queue; a panic while it was held cannot have left it half-changed (each change is
    /// one push or pop), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `frame`; false when the queue is at its bound of frames or bytes.
    fn push(&self, frame: Live) -> bool {
        let bytes = cost(&frame);
        {
            let mut queue = self.lock();
            if queue.frames.len() >= self.capacity || queue.bytes + bytes > self.max_bytes {
                return false;
            }
            queue.bytes += bytes;
            queue.frames.push_back(frame);
        }
        self.ready.notify_one();
        true
    }

    fn pop(&self) -> Option<Live> {
        let mut queue = self.lock();
        let frame = queue.frames.pop_front();
        if queue.frames.is_empty() && queue.frames.capacity() > KEPT_CAPACITY {
            queue.frames = VecDeque::new();
        }
        frame
    }
}

struct Entry {
    principal: Principal,
    outbox: Arc<Outbox>,
    slow: CancellationToken,
    /// sub id → (generation, filters); generations only grow within a connection.
    subs: HashMap<String, (u64, Arc<Vec<Filter>>)>,
}

impl Entry {
    /// The pubkey the connection authenticated as (NIP-42), if it did.
    fn reader(&self) -> Option<PubKey> {
        match self.principal {
            Principal::Pubkey(pubkey) => Some(pubkey),
            _ => None,
        }
    }
}

/// The connections and the index of their subscriptions, changed together under one lock.
#[derive(Default)]
struct Conns {
    entries: HashMap<ConnId, Entry>,
    index: Index,
}

/// The subscription registry shared by every connection.
#[derive(Default)]
pub struct Fanout {
    conns: RwLock<Conns>,
    next_id: AtomicU64,
    subscriptions: AtomicU64,
    /// Events of these kinds go only to connections authenticated as one of their parties.
    private: PrivateKinds,
    /// The events of a private group go only to its members (NIP-29).
    groups: Option<Arc<crate::groups::Registry>>,
}

/// A connection's registration: dropping it unregisters the connection.
pub struct Registration {
    fanout: Arc<Fanout>,
    /// This connection's id.
    pub id: ConnId,
    /// Cancelled when the connection fell behind and must be closed.
    pub slow: CancellationToken,
    outbox: Arc<Outbox>,
}

impl Registration {
    /// The next live frame, once there is one.
    pub async fn recv(&self) -> Live {
        loop {
            // The queue is read before waiting, so a wake-up lost to a cancelled wait (the
            // connection's select took another branch) never strands a frame.
            if let Some(frame) = self.outbox.pop() {
                return frame;
            }
            self.outbox.ready.notified().await;
        }
    }

    /// The next live frame if one is queued.
    pub fn try_recv(&self) -> Option<Live> {
        self.outbox.pop()
    }

    /// Takes one live frame off the queue's bytes, once it is written.
    pub fn written(&self, frame: &Live) {
        let mut queue = self.outbox.lock();
        queue.bytes = queue.bytes.saturating_sub(cost(frame));
    }
}

impl Live {
    /// Its EVENT frame.
    pub fn frame(&self) -> RelayMessage {
        RelayMessage::Event { sub_id: self.sub_id.clone(), event: self.event.clone() }
    }
}

/// What a queued frame counts against `server.max_outbound_bytes`: about its size on the wire
/// (`["EVENT","<sub id>",<event>]`).
fn cost(live: &Live) -> usize {
    live.event.as_str().len() + live.sub_id.len() + 12
}

impl Drop for Registration {
    fn drop(&mut self) {
        let removed = {
            let mut conns = self.fanout.write();
            let removed = conns.entries.remove(&self.id);
            for (_, filters) in removed.iter().flat_map(|e| e.subs.values()) {
                conns.index.note(self.id, filters, false);
            }
            removed
        };
        if let Some(entry) = removed {
            self.fanout.count_subscriptions(-(entry.subs.len() as i64));
        }
    }
}

impl Fanout {
    /// A registry that delivers events of the `private` kinds only to their parties, and those
    /// of private `groups` only to their members.
    pub fn new(private: PrivateKinds, groups: Arc<crate::groups::Registry>) -> Fanout {
        Fanout { private, groups: Some(groups), ..Fanout::default() }
    }

    /// Registers a connection billed to `principal` with an outbound queue of `capacity` live
    /// events.
    pub fn register(self: &Arc<Self>, capacity: usize, max_bytes: usize, principal: Principal) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let outbox = Arc::new(Outbox {
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
            capacity: capacity.max(1),
            max_bytes,
        });
        let slow = CancellationToken::new();
        let entry = Entry { principal, outbox: outbox.clone(), slow: slow.clone(), subs: HashMap::new() };
        self.write().entries.insert(id, entry);
        Registration { fanout: self.clone(), id, slow, outbox }
    }

    /// Adds subscription `sub_id` of connection `conn` as `generation`, replacing an older
    /// generation of the same id (never a newer one: queries of replaced REQs finish late).
    pub fn subscribe(&self, conn: ConnId, sub_id: &str, generation: u64, filters: Vec<Filter>) {
        let mut conns = self.write();
        let Conns { entries, index } = &mut *conns;
        let Some(entry) = entries.get_mut(&conn) else { return };
        if entry.subs.get(sub_id).is_some_and(|(existing, _)| *existing > generation) {
            return;
        }
        index.note(conn, &filters, true);
        match entry.subs.insert(sub_id.to_string(), (generation, Arc::new(filters))) {
            Some((_, replaced)) => index.note(conn, &replaced, false),
            None => self.count_subscriptions(1),
        }
    }

    /// Removes subscription `sub_id` of connection `conn` if it is `generation` (or any
    /// generation, for `None`); true when something was removed.
    pub fn unsubscribe(&self, conn: ConnId, sub_id: &str, generation: Option<u64>) -> bool {
        let removed = {
            let mut conns = self.write();
            let Conns { entries, index } = &mut *conns;
            match entries.get_mut(&conn) {
                Some(entry)
                    if entry.subs.get(sub_id).is_some_and(|(g, _)| generation.is_none_or(|want| want == *g)) =>
                {
                    let removed = entry.subs.remove(sub_id);
                    if let Some((_, filters)) = &removed {
                        index.note(conn, filters, false);
                    }
                    removed.is_some()
                }
                _ => false,
            }
        };
        if removed {
            self.count_subscriptions(-1);
        }
        removed
    }

    fn count_subscriptions(&self, delta: i64) {
        let total = if delta >= 0 {
            self.subscriptions.fetch_add(delta.unsigned_abs(), Ordering::Relaxed) + delta.unsigned_abs()
        } else {
            self.subscriptions.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed) - delta.unsigned_abs()
        };
        metrics::gauge!("hearth_subscriptions_open").set(total as f64);
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.read().entries.len()
    }

    /// Open subscriptions, over every connection.
    pub fn subscriptions(&self) -> u64 {
        self.subscriptions.load(Ordering::Relaxed)
    }

    /// Records that connection `conn` is now billed to `principal` (after NIP-42 AUTH).
    pub fn set_principal(&self, conn: ConnId, principal: Principal) {
        if let Some(entry) = self.write().entries.get_mut(&conn) {
            entry.principal = principal;
        }
    }

    /// Open connections and subscriptions billed to `principal`.
    pub fn presence(&self, principal: &Principal) -> (usize, usize) {
        self.read()
            .entries
            .values()
            .filter(|e| &e.principal == principal)
            .fold((0, 0), |(c, s), e| (c + 1, s + e.subs.len()))
    }

    /// Open subscriptions on the whole relay.
    #[cfg(test)]
    fn total_subscriptions(&self) -> u64 {
        self.subscriptions.load(Ordering::Relaxed)
    }

    /// The registry for reading. A panic while it was held cannot have left it half-changed
    /// (every change is one insert or remove), so a poisoned lock is used as it is, not skipped.
    fn read(&self) -> RwLockReadGuard<'_, Conns> {
        self.conns.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registry for changing (see [`Fanout::read`] on poisoning).
    fn write(&self) -> RwLockWriteGuard<'_, Conns> {
        self.conns.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Delivers `event`, visible in the store from `mark` (`None`: never stored), to every
    /// matching subscription, once each. It is serialized once, when the first match is found
    /// (an event nobody subscribed to is never serialized).
    pub fn publish(&self, event: &Event, mark: Option<Mark>) {
        let conns = self.read();
        let json: OnceCell<Option<EventJson>> = OnceCell::new();
        let private = self.private.contains(event.kind);
        // Who may be sent an event of a group is its members, as the groups stand now.
        let groups = self.groups.as_ref().filter(|g| g.concerns(event)).map(|g| g.read());
        // The connections its groups index and the general ones, when they are few; else all.
        let candidates = conns.index.candidates(event.tag_values("h"), conns.entries.len());
        let entries: Box<dyn Iterator<Item = &Entry>> = match &candidates {
            Some(ids) => Box::new(ids.iter().filter_map(|id| conns.entries.get(id))),
            None => Box::new(conns.entries.values()),
        };
        for entry in entries {
            if entry.slow.is_cancelled() {
                continue;
            }
            // A private event goes only to a connection authenticated as one of its parties,
            // whenever it authenticated (the connection's principal is its NIP-42 pubkey then).
            if private && !self.private.viewer(entry.reader()).may_read(event.kind, &event.pubkey, &event.tags) {
                continue;
            }
            if groups.as_ref().is_some_and(|g| !g.may_deliver(event, entry.reader().as_ref())) {
                continue;
            }
            for (sub_id, (generation, filters)) in &entry.subs {
                if !filters.iter().any(|f| live_match(f, event)) {
                    continue;
                }
                let serialized = json.get_or_init(|| {
                    event
                        .to_shared_json()
                        .inspect_err(|e| tracing::error!(error = %e, "an event did not serialize"))
                        .ok()
                });
                let Some(json) = serialized.clone() else { return };
                let live = Live { sub_id: sub_id.clone(), event: json, generation: *generation, mark };
                if !entry.outbox.push(live) {
                    // Past its bound: cut the connection off rather than queue without bound.
                    // The bound is generous: a client that reads as fast as its socket takes
                    // bytes is cut off by its socket (see `ws::conn`), not here.
                    entry.slow.cancel();
                    metrics::counter!("hearth_slow_consumers_total").increment(1);
                    break;
                }
            }
        }
    }
}

/// Whether a live `event` goes to a subscription's `filter`: its NIP-50 `search` (checked when
/// the subscription was opened) is matched against the event's text as the index would.
fn live_match(filter: &Filter, event: &Event) -> bool {
    filter.matches(event)
        && filter.search.as_deref().is_none_or(|text| {
            crate::protocol::search::parse(text, usize::MAX).is_ok_and(|query| crate::search::matches(&query, event))
        })
}

#[cfg(test)]
mod tests;
