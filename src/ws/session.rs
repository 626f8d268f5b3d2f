//! Per-connection session state, pure and unit-tested: open subscriptions and who is connected.
//!
//! Owns which subscription ids are open on one connection (with a generation, so a query that
//! finishes after its subscription was closed or replaced is dropped), which live events each
//! subscription is sent (each event once, whether its query or its live feed found it), the
//! NIP-42 challenge and the authenticated pubkey. Each open subscription holds its place among
//! the relay's ([`Slot`]), given back when it is closed or the session dropped.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::neg::Negs;
use crate::fanout::Live;
use crate::limiter::{Billed, Principal};
use crate::protocol::{EventJson, PubKey, RelayMessage};
use crate::store::Mark;
use crate::subscription_caps::{Slot, SlotError};

/// An open subscription.
#[derive(Debug)]
struct Sub {
    generation: u64,
    scan: Scan,
    /// Its place among the relay's open subscriptions, given back when it is dropped.
    _slot: Slot,
}

/// Where a subscription's query is. Its live feed starts before the query looks (so no event
/// stored meanwhile is missed), so an event stored in between reaches it both ways.
#[derive(Debug)]
enum Scan {
    /// The query has not answered yet: the live events sent meanwhile, left out of its answer
    /// (by their JSON: the store renders an event with the very bytes fan-out serializes).
    Running(HashSet<EventJson>),
    /// The query answered, having seen what was visible at this mark: a live event visible by
    /// then was in its answer (or past its `limit`).
    Answered(Mark),
}

/// State of one WebSocket connection.
#[derive(Debug)]
pub struct Session {
    subs: HashMap<String, Sub>,
    next_generation: u64,
    /// The client's address, billed while unauthenticated.
    pub client_ip: IpAddr,
    /// The NIP-42 challenge sent on connect.
    pub challenge: String,
    /// The pubkey this connection authenticated as (NIP-42), if any.
    pub authed: Option<PubKey>,
    /// The open NIP-77 sync sessions.
    pub negs: Negs,
    /// Resolves (or is dropped) when this connection's latest change to a group is done.
    last_group_change: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Session {
    /// A new connection's session.
    pub fn new(client_ip: IpAddr, challenge: String) -> Session {
        Session {
            subs: HashMap::new(),
            next_generation: 0,
            client_ip,
            challenge,
            authed: None,
            negs: Negs::default(),
            last_group_change: None,
        }
    }

    /// A place in line for a change to a group: what to wait for (the change this connection
    /// sent before), and what to drop once this one is done.
    pub fn group_turn(&mut self) -> (Option<tokio::sync::oneshot::Receiver<()>>, tokio::sync::oneshot::Sender<()>) {
        let (done, next) = tokio::sync::oneshot::channel();
        (self.last_group_change.replace(next), done)
    }

    /// Who this connection's frames are billed to: the authenticated pubkey, else the IP.
    pub fn principal(&self) -> Principal {
        match self.authed {
            Some(pk) => Principal::Pubkey(pk),
            None => Principal::Ip(self.client_ip),
        }
    }

    /// What this connection's frames bill: its principal, and its IP's ceiling under it.
    pub fn billed(&self) -> Billed {
        Billed::new(self.principal(), self.client_ip)
    }

    /// Opens (or replaces, in the place it holds) `sub_id`; a new id needs room on this
    /// connection (`max_subscriptions`) and a place from `slot`. `Err` is the refusal's whole
    /// message.
    pub fn open(
        &mut self,
        sub_id: &str,
        max_subscriptions: usize,
        slot: impl FnOnce() -> Result<Slot, SlotError>,
    ) -> Result<u64, String> {
        let slot = match self.subs.remove(sub_id) {
            Some(replaced) => replaced._slot,
            None if self.subs.len() >= max_subscriptions => {
                return Err(format!("error: too many subscriptions: at most {max_subscriptions} per connection"));
            }
            None => slot().map_err(|e| format!("blocked: {e}"))?,
        };
        self.next_generation += 1;
        let sub = Sub { generation: self.next_generation, scan: Scan::Running(HashSet::new()), _slot: slot };
        self.subs.insert(sub_id.to_string(), sub);
        Ok(self.next_generation)
    }

    /// Closes `sub_id`; true when it was open.
    pub fn close(&mut self, sub_id: &str) -> bool {
        self.subs.remove(sub_id).is_some()
    }

    /// True when `sub_id` is still the subscription opened as `generation`.
    pub fn is_current(&self, sub_id: &str, generation: u64) -> bool {
        self.subs.get(sub_id).is_some_and(|sub| sub.generation == generation)
    }

    /// `sub_id` if it is still the subscription opened as `generation`.
    fn current_mut(&mut self, sub_id: &str, generation: u64) -> Option<&mut Sub> {
        self.subs.get_mut(sub_id).filter(|sub| sub.generation == generation)
    }

    /// The answer of `sub_id`'s query (its stored events, then EOSE), without the events its
    /// live feed already sent; `None` when the subscription was closed or replaced meanwhile.
    pub fn answered(
        &mut self,
        sub_id: &str,
        generation: u64,
        mark: Mark,
        mut frames: Vec<RelayMessage>,
    ) -> Option<Vec<RelayMessage>> {
        let sub = self.current_mut(sub_id, generation)?;
        if let Scan::Running(sent) = std::mem::replace(&mut sub.scan, Scan::Answered(mark))
            && !sent.is_empty()
        {
            frames.retain(|frame| !matches!(frame, RelayMessage::Event { event, .. } if sent.contains(event)));
        }
        Some(frames)
    }

    /// Whether a live frame is to be sent: not when its subscription was closed or replaced,
    /// nor when the subscription's query saw its event.
    pub fn admits(&mut self, live: &Live) -> bool {
        let Some(sub) = self.current_mut(&live.sub_id, live.generation) else { return false };
        match (&mut sub.scan, live.mark) {
            (Scan::Running(sent), mark) => {
                if mark.is_some() {
                    sent.insert(live.event.clone());
                }
                true
            }
            (Scan::Answered(_), None) => true,
            (Scan::Answered(seen), Some(mark)) => mark > *seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Keys, Kind, Timestamp};
    use crate::subscription_caps::Slots;
    use std::sync::Arc;

    /// A place from a relay with room for everything.
    fn room() -> Result<Slot, SlotError> {
        Arc::new(Slots::new(1000, 1000)).take(None)
    }

    fn event_frame(sub_id: &str, n: u8) -> RelayMessage {
        let event = Keys::test(n).sign(Timestamp(1), Kind(1), vec![], "x");
        RelayMessage::Event { sub_id: sub_id.into(), event: event.to_shared_json().unwrap() }
    }

    fn live(frame: &RelayMessage, generation: u64, mark: Option<Mark>) -> Live {
        let RelayMessage::Event { sub_id, event } = frame else { panic!("not an EVENT: {frame:?}") };
        Live { sub_id: sub_id.clone(), event: event.clone(), generation, mark }
    }

    /// Real marks, from a store: the first two events' and the one after them.
    async fn marks() -> (Mark, Mark, Mark) {
        let store = crate::store::Store::temporary().unwrap();
        let mut marks = Vec::new();
        for n in 1..=3 {
            let event = Keys::test(n).sign(Timestamp(1), Kind(1), vec![], "x");
            match store.put(crate::protocol::verify::verify(event).unwrap()).await.unwrap() {
                crate::store::PutOutcome::Stored(mark) => marks.push(mark),
                other => panic!("{other:?}"),
            }
        }
        (marks[0], marks[1], marks[2])
    }

    #[tokio::test]
    async fn a_subscription_gets_each_event_once_whether_its_query_or_its_live_feed_found_it() {
        let (first, second, third) = marks().await;
        let mut s = Session::new(IpAddr::from([127, 0, 0, 1]), "c".into());
        let g = s.open("a", 10, room).unwrap();
        let (e1, e2, e3) = (event_frame("a", 1), event_frame("a", 2), event_frame("a", 3));
        // While the query runs, live events go out, and its answer leaves them out.
        assert!(s.admits(&live(&e1, g, Some(first))));
        let answer = s.answered("a", g, second, vec![e1.clone(), e2.clone(), RelayMessage::Eose("a".into())]);
        assert_eq!(answer, Some(vec![e2.clone(), RelayMessage::Eose("a".into())]));
        // After it, a live event the query saw (visible by its mark) is not sent again; a later
        // one, and one never stored, are.
        assert!(!s.admits(&live(&e2, g, Some(second))));
        assert!(s.admits(&live(&e3, g, Some(third))));
        assert!(s.admits(&live(&e3, g, None)));
    }

    #[tokio::test]
    async fn a_closed_or_replaced_subscription_gets_no_more_live_events() {
        let (first, ..) = marks().await;
        let mut s = Session::new(IpAddr::from([127, 0, 0, 1]), "c".into());
        let old = s.open("a", 10, room).unwrap();
        let new = s.open("a", 10, room).unwrap();
        let e = event_frame("a", 1);
        assert!(!s.admits(&live(&e, old, Some(first))));
        assert_eq!(s.answered("a", old, first, vec![RelayMessage::Eose("a".into())]), None);
        assert!(s.admits(&live(&e, new, Some(first))));
        assert!(s.close("a"));
        assert!(!s.admits(&live(&e, new, None)));
    }

    #[test]
    fn replacing_a_sub_does_not_count_twice_and_bumps_generation() {
        let mut s = Session::new(IpAddr::from([127, 0, 0, 1]), "c".into());
        let g1 = s.open("a", 1, room).unwrap();
        let g2 = s.open("a", 1, room).unwrap();
        assert_ne!(g1, g2);
        assert!(!s.is_current("a", g1));
        assert!(s.is_current("a", g2));
        assert!(s.open("b", 1, room).is_err());
        assert!(s.close("a"));
        assert!(s.open("b", 1, room).is_ok());
    }

    #[test]
    fn a_new_id_takes_a_place_a_replaced_one_keeps_its_own_and_a_closed_one_gives_it_back() {
        let slots = Arc::new(Slots::new(2, 100));
        let take = || slots.take(Some(Principal::Ip(IpAddr::from([127, 0, 0, 1]))));
        let mut s = Session::new(IpAddr::from([127, 0, 0, 1]), "c".into());
        s.open("a", 10, take).unwrap();
        s.open("a", 10, take).unwrap();
        s.open("b", 10, take).unwrap();
        assert_eq!(slots.open(), 2);
        assert_eq!(
            s.open("c", 10, take).unwrap_err(),
            "blocked: too many subscriptions open from your address: at most 2; close some first"
        );
        assert_eq!(s.open("c", 1, take).unwrap_err(), "error: too many subscriptions: at most 1 per connection");
        s.close("a");
        assert_eq!(slots.open(), 1);
        drop(s);
        assert_eq!(slots.open(), 0);
    }
}
