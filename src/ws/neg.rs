//! NIP-77 negentropy sessions on one connection: NEG-OPEN, NEG-MSG, NEG-CLOSE.
//!
//! Owns which sync sessions a connection holds ([`Negs`]) and what each NEG frame asks of them.
//! A NEG-OPEN bills the frame (`ws_reqs`, by the caller), is refused like a REQ by the access
//! rules (`auth-required:` / `restricted:` as a `NEG-ERR`, with the AUTH challenge again), takes
//! a place among the subscriptions of its address and of the relay ([`crate::subscription_caps`]), then,
//! holding a handler permit, reads its filter's item set from the store's index
//! ([`crate::store::Store::items`]: private kinds as the connection may read them; more than
//! `sync.max_items` is `NEG-ERR "blocked: too many records"`) and answers the initiator's
//! message. Reconciling is the `negentropy` crate's; it runs on the blocking pool, since a round
//! over half a million items is CPU work. A session is held between messages (its item set with
//! it) until NEG-CLOSE, a NEG-OPEN of the same id, `sync.idle_secs` without a message, or the
//! connection's end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use negentropy::{Id, Negentropy, NegentropyStorageVector};

use crate::app::AppState;
use crate::limiter::{Billed, RateLimited};
use crate::protocol::refusal::Refusal;
use crate::protocol::{Filter, RelayMessage, Timestamp, Viewer};
use crate::subscription_caps::{Slot, SlotError};
use crate::sync::status::Held;

/// A reconciling side of one session: the relay's items, owned.
type Reconciler = Negentropy<'static, NegentropyStorageVector>;

/// Why a session is refused or ended, as its `NEG-ERR` says.
pub(super) const TOO_MANY_RECORDS: &str = "blocked: too many records";
/// A NEG-OPEN refused because the relay's sessions hold `sync.max_items_held` items already.
const RELAY_FULL: &str =
    "blocked: the relay's open sync sessions hold as many items as it allows; try again when they close";

/// The open negentropy sessions of one connection.
#[derive(Default)]
pub struct Negs {
    open: HashMap<String, Open>,
    next_generation: u64,
}

/// One open session: its reconciler, absent while a message of it is being answered, and its
/// items' count in the relay's total.
struct Open {
    generation: u64,
    reconciler: Option<Box<Reconciler>>,
    held: Option<Held>,
    last: Instant,
    /// Its place among the subscriptions of its address and of the relay.
    _slot: Slot,
}

/// A session's reconciler with its count in the relay's total of held items.
pub struct Negotiation {
    reconciler: Box<Reconciler>,
    held: Option<Held>,
}

/// What answering a NEG frame came to, for the connection's loop to apply ([`Negs::finish`]).
pub struct NegDone {
    sub_id: String,
    generation: u64,
    result: Result<(Negotiation, Vec<u8>), String>,
}

impl std::fmt::Debug for Negs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Negs").field("open", &self.open.len()).finish()
    }
}

impl Negs {
    /// Registers a NEG-OPEN of `sub_id` (replacing an open one of that id); `Err` is the NEG-ERR
    /// when the connection holds `max` sessions already, or when `slot` finds no place for one
    /// more under the address's and the relay's bounds (a session is held like a subscription).
    pub fn open(
        &mut self,
        sub_id: &str,
        max: usize,
        slot: impl FnOnce() -> Result<Slot, SlotError>,
    ) -> Result<u64, RelayMessage> {
        let slot = match self.open.remove(sub_id) {
            Some(replaced) => replaced._slot,
            None if self.open.len() >= max => {
                return Err(neg_err(
                    sub_id,
                    format!("blocked: too many open negentropy sessions: at most {max} per connection"),
                ));
            }
            None => slot().map_err(|e| neg_err(sub_id, format!("blocked: {e}")))?,
        };
        self.next_generation += 1;
        let open =
            Open { generation: self.next_generation, reconciler: None, held: None, last: Instant::now(), _slot: slot };
        self.open.insert(sub_id.to_string(), open);
        Ok(self.next_generation)
    }

    /// Takes the reconciler of `sub_id` for its next message; `Err` is the NEG-ERR for an id with
    /// no session, or one whose last message is still being answered (which ends it).
    pub fn take(&mut self, sub_id: &str) -> Result<(u64, Negotiation), RelayMessage> {
        let Some(open) = self.open.get_mut(sub_id) else {
            return Err(neg_err(sub_id, "closed: no negentropy session is open with this id".into()));
        };
        match open.reconciler.take() {
            Some(reconciler) => {
                open.last = Instant::now();
                Ok((open.generation, Negotiation { reconciler, held: open.held.take() }))
            }
            None => {
                self.open.remove(sub_id);
                Err(neg_err(sub_id, "invalid: a NEG-MSG came before the last message was answered".into()))
            }
        }
    }

    /// Ends `sub_id`'s session (NEG-CLOSE); nothing is answered.
    pub fn close(&mut self, sub_id: &str) {
        self.open.remove(sub_id);
    }

    /// Applies a finished answer: the frame to send, or None when its session was closed or
    /// replaced meanwhile. A failed answer ends the session.
    pub fn finish(&mut self, done: NegDone) -> Option<RelayMessage> {
        let NegDone { sub_id, generation, result } = done;
        let open = self.open.get_mut(&sub_id).filter(|open| open.generation == generation)?;
        match result {
            Ok((session, message)) => {
                open.reconciler = Some(session.reconciler);
                open.held = session.held;
                open.last = Instant::now();
                Some(RelayMessage::NegMsg { sub_id, message })
            }
            Err(reason) => {
                self.open.remove(&sub_id);
                Some(neg_err(&sub_id, reason))
            }
        }
    }

    /// Ends the sessions idle for longer than `idle` (none is ended while its answer runs), with
    /// the NEG-ERR that tells each client.
    pub fn expire(&mut self, now: Instant, idle: Duration) -> Vec<RelayMessage> {
        let stale: Vec<String> = self
            .open
            .iter()
            .filter(|(_, open)| open.reconciler.is_some() && now.duration_since(open.last) > idle)
            .map(|(id, _)| id.clone())
            .collect();
        stale
            .into_iter()
            .map(|id| {
                self.open.remove(&id);
                neg_err(&id, format!("closed: the session was idle for more than {} seconds", idle.as_secs()))
            })
            .collect()
    }
}

/// A `NEG-ERR` frame.
pub(super) fn neg_err(sub_id: &str, reason: String) -> RelayMessage {
    RelayMessage::NegErr { sub_id: sub_id.to_string(), reason }
}

/// The NEG-ERR of a refusal.
pub(super) fn refused(sub_id: &str, refusal: &Refusal) -> RelayMessage {
    neg_err(sub_id, refusal.to_string())
}

/// Answers a NEG-OPEN: the item set of `filter` for `viewer`, and the reply to `message`.
pub(super) async fn open(
    app: std::sync::Arc<AppState>,
    billed: Billed,
    sub_id: String,
    generation: u64,
    filter: Filter,
    message: Vec<u8>,
    viewer: Viewer,
) -> NegDone {
    let result = async {
        if let Some(refusal) = filter.search_refusal() {
            return Err(format!("blocked: {refusal}"));
        }
        let _permit = app.limiter.acquire_handler(&billed).await.map_err(|e: RateLimited| e.to_string())?;
        let sync = &app.config.sync;
        let items = app.store.items_async(filter, Timestamp::now(), viewer, sync.max_items).await.map_err(|e| {
            tracing::error!(error = %e, "reading a negentropy item set failed");
            "error: reading the item set failed".to_string()
        })?;
        let items = items.ok_or_else(|| TOO_MANY_RECORDS.to_string())?;
        let held = app.sync.hold(items.len(), sync.max_items_held).ok_or_else(|| RELAY_FULL.to_string())?;
        let frame_size_limit = sync.frame_size_limit;
        blocking(move || {
            let mut storage = NegentropyStorageVector::with_capacity(items.len());
            for (at, id) in items {
                storage.insert(at.0, Id::from_byte_array(id.0)).map_err(failed)?;
            }
            storage.seal().map_err(failed)?;
            let mut reconciler = Box::new(Negentropy::owned(storage, frame_size_limit).map_err(failed)?);
            let reply = reconciler.reconcile(&message).map_err(invalid)?;
            Ok((Negotiation { reconciler, held: Some(held) }, reply))
        })
        .await
    }
    .await;
    NegDone { sub_id, generation, result }
}

/// Answers a NEG-MSG of an open session.
pub(super) async fn message(sub_id: String, generation: u64, mut session: Negotiation, message: Vec<u8>) -> NegDone {
    let result = blocking(move || {
        let reply = session.reconciler.reconcile(&message).map_err(invalid)?;
        Ok((session, reply))
    })
    .await;
    NegDone { sub_id, generation, result }
}

/// Runs reconciling work on the blocking pool.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("error: {e}"))?
}

/// A message the crate could not read: the client's fault.
fn invalid(e: negentropy::Error) -> String {
    format!("invalid: the negentropy message could not be read: {e}")
}

/// A failure of the relay's own side.
fn failed(e: negentropy::Error) -> String {
    tracing::error!(error = %e, "building a negentropy session failed");
    format!("error: {e}")
}
