//! The limiter's principal table: bounded per-principal state, the one place it is kept.
//!
//! Owns where quota state lives and how it is forgotten. The table is split into shards, each a
//! mutex around an insertion-ordered hash map (so an entry can be picked by position), and one
//! count bounds them all. When the table is full, a new principal takes the place of the least
//! recently used of a few entries sampled from its own shard (sampled LRU, as Redis does), so a
//! flood of fresh principals costs one eviction each and never grows memory past
//! `max_tracked_principals`. An entry untouched for longer than the idle time counts as absent.
//! Time is the limiter's clock in whole seconds, so tests move it by hand.
//!
//! A second backend (e.g. Redis) would replace this module behind the same three calls:
//! [`Table::update`], [`Table::read`] and [`Table::keys`].

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use indexmap::IndexMap;

use super::principal::Principal;

/// Shards at most (fewer for small bounds, so the bound is exact).
const MAX_SHARDS: usize = 64;
/// Entries per shard below which one shard is enough.
const MIN_PER_SHARD: usize = 1024;
/// Entries sampled to pick one to evict.
const SAMPLES: usize = 8;

struct Slot<S> {
    state: S,
    /// Limiter clock, seconds, of the last touch.
    touched: u32,
}

struct Shard<S> {
    map: IndexMap<Principal, Slot<S>, RandomState>,
    /// xorshift state for sampling.
    rng: u64,
}

impl<S> Shard<S> {
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Removes the least recently touched of `SAMPLES` entries picked at random; false when the
    /// shard is empty.
    fn evict_one(&mut self) -> bool {
        let len = self.map.len();
        let mut victim = None::<(usize, u32)>;
        for _ in 0..SAMPLES.min(len) {
            // `len` fits in u64 and the remainder is below `len`, so both casts are lossless.
            let at = (self.next() % len as u64) as usize;
            if let Some((_, slot)) = self.map.get_index(at)
                && victim.is_none_or(|(_, touched)| slot.touched < touched)
            {
                victim = Some((at, slot.touched));
            }
        }
        victim.is_some_and(|(at, _)| self.map.swap_remove_index(at).is_some())
    }
}

/// Locks a shard. A poisoned shard only means a panic elsewhere mid-update; its state is still
/// usable.
fn lock<S>(shard: &Mutex<Shard<S>>) -> MutexGuard<'_, Shard<S>> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a table's state says of itself: until when (limiter clock, seconds) it must be kept
/// however idle it is, because it still holds debt (a day-long quota's cells in use).
pub(super) trait Kept {
    /// Kept at least until then; 0 = only the idle time counts.
    fn kept_until(&self) -> u32 {
        0
    }
}

impl Kept for u32 {}

/// Bounded state of type `S` per principal.
pub(super) struct Table<S> {
    shards: Box<[Mutex<Shard<S>>]>,
    /// Entries held, over all shards (idle ones included until evicted).
    len: AtomicUsize,
    max: usize,
    idle_secs: u32,
    hasher: RandomState,
}

impl<S: Kept> Table<S> {
    /// A table of at most `max` entries, forgetting those idle for longer than `idle_secs` (and
    /// owing nothing: see [`Kept`]).
    pub fn new(max: u64, idle_secs: u32) -> Table<S> {
        let max = usize::try_from(max).unwrap_or(usize::MAX).max(1);
        let count = (max / MIN_PER_SHARD).clamp(1, MAX_SHARDS);
        let shards = (0..count)
            .map(|n| {
                // Any non-zero seed works; spread them so shards sample differently.
                let rng = 0x9E37_79B9_7F4A_7C15_u64.wrapping_mul(n as u64 + 1) | 1;
                Mutex::new(Shard { map: IndexMap::with_hasher(RandomState::new()), rng })
            })
            .collect();
        Table { shards, len: AtomicUsize::new(0), max, idle_secs, hasher: RandomState::new() }
    }

    fn shard(&self, principal: &Principal) -> MutexGuard<'_, Shard<S>> {
        let at = (self.hasher.hash_one(principal) % self.shards.len() as u64) as usize;
        lock(&self.shards[at])
    }

    fn live(&self, slot: &Slot<S>, now: u32) -> bool {
        now.saturating_sub(slot.touched) <= self.idle_secs || now <= slot.state.kept_until()
    }

    /// Runs `f` on `principal`'s state, creating it with `fresh` when absent or idle (evicting
    /// another entry if the table is full), and marks it touched at `now`.
    pub fn update<R>(
        &self,
        principal: &Principal,
        now: u32,
        fresh: impl FnOnce() -> S,
        f: impl FnOnce(&mut S) -> R,
    ) -> R {
        let mut shard = self.shard(principal);
        if let Some(slot) = shard.map.get_mut(principal) {
            if !self.live(slot, now) {
                slot.state = fresh();
            }
            slot.touched = now;
            return f(&mut slot.state);
        }
        let mut state = fresh();
        let out = f(&mut state);
        // Reserve a place first, so racing inserts in other shards cannot overshoot the bound.
        if self.len.fetch_add(1, Ordering::Relaxed) >= self.max {
            // Full: the new entry takes the place of an evicted one.
            self.len.fetch_sub(1, Ordering::Relaxed);
            if !shard.evict_one() {
                // This shard holds nothing to evict (the others hold everything): bill this
                // request on fresh state without keeping it.
                return out;
            }
        }
        shard.map.insert(*principal, Slot { state, touched: now });
        out
    }

    /// Runs `f` on `principal`'s state if it is held and not idle; touches nothing.
    pub fn read<R>(&self, principal: &Principal, now: u32, f: impl FnOnce(&S) -> R) -> Option<R> {
        let shard = self.shard(principal);
        shard.map.get(principal).filter(|slot| self.live(slot, now)).map(|slot| f(&slot.state))
    }

    /// The principals held and not idle at `now`.
    pub fn keys(&self, now: u32) -> Vec<Principal> {
        let mut keys = Vec::new();
        for shard in self.shards.iter().map(lock) {
            keys.extend(shard.map.iter().filter(|(_, slot)| self.live(slot, now)).map(|(k, _)| *k));
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn ip(n: u32) -> Principal {
        Principal::Ip(IpAddr::V4(Ipv4Addr::from(n)))
    }

    #[test]
    fn a_full_table_holds_exactly_the_bound() {
        for max in [1, 7, 1000, 5000, 70_000] {
            let t = Table::<u32>::new(max, 60);
            for n in 0..100_000 {
                t.update(&ip(n), 0, || 0, |_| ());
            }
            assert_eq!(t.keys(0).len() as u64, max);
        }
    }

    #[test]
    fn state_is_kept_until_idle_then_fresh() {
        let t = Table::<u32>::new(10, 60);
        t.update(&ip(1), 100, || 0, |s| *s += 5);
        assert_eq!(t.read(&ip(1), 160, |s| *s), Some(5));
        assert_eq!(t.read(&ip(1), 161, |s| *s), None);
        assert!(t.keys(161).is_empty());
        assert_eq!(t.update(&ip(1), 161, || 0, |s| *s), 0);
    }

    /// A state that owes until a given second.
    struct Owing(u32);

    impl Kept for Owing {
        fn kept_until(&self) -> u32 {
            self.0
        }
    }

    #[test]
    fn a_state_in_debt_is_kept_past_the_idle_time() {
        let t = Table::<Owing>::new(10, 60);
        t.update(&ip(1), 100, || Owing(0), |s| s.0 = 10_000);
        assert_eq!(t.read(&ip(1), 9_999, |s| s.0), Some(10_000));
        assert_eq!(t.read(&ip(1), 10_001, |s| s.0), None);
    }

    #[test]
    fn eviction_prefers_the_least_recently_touched() {
        // One hot principal touched every step survives a flood of ten times the bound.
        let t = Table::<u32>::new(100, 3600);
        t.update(&ip(0), 0, || 0, |s| *s = 42);
        for n in 1..1000 {
            t.update(&ip(0), n, || 0, |_| ());
            t.update(&ip(n), n, || 0, |_| ());
        }
        assert_eq!(t.read(&ip(0), 1000, |s| *s), Some(42));
    }
}
