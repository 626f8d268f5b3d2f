//! The bound on open subscriptions beyond one connection: per client address and relay-wide.
//!
//! Owns [`Slots`], the count of subscriptions held open on this node, and the [`Slot`] each open
//! subscription (and each open negentropy session, which holds its item set as long) keeps: dropping it (the subscription closed or its connection gone) gives the
//! place back. `limitation.max_subscriptions` bounds one connection (the session counts that);
//! this bounds what many connections hold together, so that no address and no number of
//! connections makes the node hold more subscriptions than `server.max_subscriptions_per_ip` and
//! `server.max_subscriptions_total`. A subscription costs memory on the node that holds it, so the
//! counts are this node's own, never shared through Redis.
//!
//! A refusal is `blocked:`, not `rate-limited:`: a place frees only when some subscription is
//! closed, which the relay cannot promise for any time, so no `retry in` hint would be true.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::limiter::Principal;

/// Why a subscription was not given a place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The client's address holds its most.
    #[error("too many subscriptions open from your address: at most {0}; close some first")]
    Address(usize),
    /// The relay holds its most.
    #[error("the relay holds as many subscriptions as it can ({0}); close one or try again later")]
    Relay(usize),
}

#[derive(Default)]
struct Counts {
    total: usize,
    /// Per IP ceiling (an IPv4 address, an IPv6 network); an address at zero is removed.
    by_address: HashMap<Principal, usize>,
}

/// This node's open subscriptions, counted against its two bounds.
pub struct Slots {
    counts: Mutex<Counts>,
    max_per_address: usize,
    max_total: usize,
}

/// One open subscription's place; dropping it gives the place back.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    address: Option<Principal>,
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots").field("open", &self.open()).finish()
    }
}

impl Slots {
    /// Room for `max_per_address` subscriptions from one address and `max_total` in all.
    pub fn new(max_per_address: usize, max_total: usize) -> Slots {
        Slots { counts: Mutex::new(Counts::default()), max_per_address, max_total }
    }

    /// The counts; a panic while they were held cannot have left them half-changed (each change
    /// is two increments or two decrements that cannot fail), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more subscription from `address` (its IP ceiling; `None` for an address
    /// exempt from it, counted only in the total).
    pub fn take(self: &Arc<Self>, address: Option<Principal>) -> Result<Slot, SlotError> {
        let mut counts = self.lock();
        if counts.total >= self.max_total {
            return Err(SlotError::Relay(self.max_total));
        }
        if let Some(address) = address {
            let held = counts.by_address.entry(address).or_default();
            if *held >= self.max_per_address {
                return Err(SlotError::Address(self.max_per_address));
            }
            *held += 1;
        }
        counts.total += 1;
        Ok(Slot { slots: self.clone(), address })
    }

    /// Subscriptions open now.
    pub fn open(&self) -> usize {
        self.lock().total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.slots.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(address) = &self.address
            && let Some(held) = counts.by_address.get_mut(address)
        {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.by_address.remove(address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(n: u8) -> Option<Principal> {
        Some(Principal::ceiling_of(std::net::IpAddr::from([10, 0, 0, n]), 64))
    }

    #[test]
    fn an_address_gets_its_share_and_a_closed_subscription_gives_its_place_back() {
        let slots = Arc::new(Slots::new(2, 10));
        let a = slots.take(address(1)).unwrap();
        let _b = slots.take(address(1)).unwrap();
        assert_eq!(slots.take(address(1)).unwrap_err(), SlotError::Address(2));
        // Another address, and an exempt one, still get places.
        let _c = slots.take(address(2)).unwrap();
        let _d = slots.take(None).unwrap();
        assert_eq!(slots.open(), 4);
        drop(a);
        assert_eq!(slots.open(), 3);
        assert!(slots.take(address(1)).is_ok());
    }

    #[test]
    fn the_relay_total_bounds_every_address_together_and_the_map_forgets_empty_addresses() {
        let slots = Arc::new(Slots::new(5, 3));
        let held: Vec<Slot> = (1..=3).map(|n| slots.take(address(n)).unwrap()).collect();
        assert_eq!(slots.take(address(4)).unwrap_err(), SlotError::Relay(3));
        assert_eq!(slots.take(None).unwrap_err(), SlotError::Relay(3));
        assert_eq!(
            SlotError::Relay(3).to_string(),
            "the relay holds as many subscriptions as it can (3); close one or try again later"
        );
        drop(held);
        assert_eq!(slots.open(), 0);
        assert!(slots.lock().by_address.is_empty());
    }
}
