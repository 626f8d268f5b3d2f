//! The handler permits: a global bound on work handled at once, shared fairly.
//!
//! Owns `limits.handler_permits` and `limits.handler_permits_per_principal`: no principal, and
//! no IP ceiling, holds more than its share at once, so one client with many keys (or many
//! connections) cannot take every permit from the others. A frame over its share waits, like one
//! facing a busy relay, at most `limits.handler_wait_ms`, then is refused `relay busy
//! (unavailable)`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::principal::Principal;

/// Each key's share (a principal's, or an IP ceiling's): a semaphore of the per-key cap, so a
/// share given back wakes exactly one frame waiting for that key, first come first served, and
/// no other. An entry exists only while a permit of it is held or a frame waits for one.
struct Held {
    shares: Mutex<HashMap<Principal, Arc<Semaphore>>>,
    per_key: usize,
}

impl Held {
    fn shares(&self) -> std::sync::MutexGuard<'_, HashMap<Principal, Arc<Semaphore>>> {
        self.shares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The share of `key`, made when none is held or waited for.
    fn share_of(&self, key: Principal) -> Arc<Semaphore> {
        self.shares().entry(key).or_insert_with(|| Arc::new(Semaphore::new(self.per_key))).clone()
    }

    /// Forgets the share of each of `keys` that nobody holds or waits for (only the table
    /// refers to it: every frame's clone is taken under the same lock).
    fn tidy(&self, keys: &[Principal]) {
        let mut shares = self.shares();
        for key in keys {
            if shares.get(key).is_some_and(|s| Arc::strong_count(s) == 1 && s.available_permits() == self.per_key) {
                shares.remove(key);
            }
        }
    }
}

/// The shares a frame took, given back (and tidied) when dropped.
struct Taken {
    held: Arc<Held>,
    keys: Vec<Principal>,
    permits: Vec<OwnedSemaphorePermit>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.permits.clear();
        self.held.tidy(&self.keys);
    }
}

/// One held handler permit; dropping it gives the permit and its shares back.
pub struct HandlerPermit {
    _global: OwnedSemaphorePermit,
    taken: Taken,
}

impl std::fmt::Debug for HandlerPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerPermit").field("keys", &self.taken.keys).finish()
    }
}

/// The relay's handler permits.
pub(super) struct Permits {
    global: Arc<Semaphore>,
    held: Arc<Held>,
    wait: Duration,
}

impl Permits {
    pub(super) fn new(total: usize, per_key: usize, wait: Duration) -> Permits {
        let held = Arc::new(Held { shares: Mutex::default(), per_key });
        Permits { global: Arc::new(Semaphore::new(total)), held, wait }
    }

    /// A permit for work billed to every one of `keys`, waiting at most the handler wait for
    /// the keys' shares (taken in the order given: a principal's, then its IP ceiling's) and a
    /// global permit; `None` when none came in time, with nothing kept.
    pub(super) async fn acquire(&self, keys: Vec<Principal>) -> Option<HandlerPermit> {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut taken = Taken { held: self.held.clone(), permits: Vec::with_capacity(keys.len()), keys };
        for key in taken.keys.clone() {
            let share = self.held.share_of(key);
            let permit = tokio::time::timeout_at(deadline, share.acquire_owned()).await;
            // A share given up is tidied by `taken`'s drop, once this clone is gone too.
            taken.permits.push(permit.ok()?.ok()?);
        }
        let global = tokio::time::timeout_at(deadline, self.global.clone().acquire_owned()).await;
        Some(HandlerPermit { _global: global.ok()?.ok()?, taken })
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn ip(n: u8) -> Principal {
        Principal::Ip(IpAddr::from([127, 0, 0, n]))
    }

    #[tokio::test]
    async fn one_key_holds_at_most_its_share_while_others_still_get_permits() {
        let permits = Permits::new(10, 2, Duration::from_millis(30));
        let ceiling = Principal::ceiling_of(IpAddr::from([127, 0, 0, 1]), 64);
        let a = permits.acquire(vec![ip(1), ceiling]).await.unwrap();
        let b = permits.acquire(vec![ip(2), ceiling]).await.unwrap();
        // The ceiling's share is used up, whatever the principal.
        assert!(permits.acquire(vec![ip(3), ceiling]).await.is_none());
        // Another network is not held up.
        assert!(permits.acquire(vec![ip(4)]).await.is_some());
        drop(a);
        let c = permits.acquire(vec![ip(3), ceiling]).await;
        assert!(c.is_some(), "a share given back is taken again");
        drop((b, c));
        assert!(permits.held.shares().is_empty(), "no entry outlives its permits");
    }

    #[tokio::test]
    async fn a_waiting_frame_gets_the_share_given_back_in_time() {
        let permits = Arc::new(Permits::new(10, 1, Duration::from_secs(5)));
        let first = permits.acquire(vec![ip(1)]).await.unwrap();
        let waiter = tokio::spawn({
            let permits = permits.clone();
            async move { permits.acquire(vec![ip(1)]).await.is_some() }
        });
        tokio::task::yield_now().await;
        drop(first);
        assert!(waiter.await.unwrap());
    }

    /// Hundreds of frames of one principal queue on its share of two; each share given back
    /// goes to the next in line, so every one of them gets a permit (none is left asleep while a
    /// share is free) and the table is empty after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queue_of_frames_on_one_share_all_get_through_one_after_another() {
        let permits = Arc::new(Permits::new(64, 2, Duration::from_secs(30)));
        let ceiling = Principal::ceiling_of(IpAddr::from([127, 0, 0, 1]), 64);
        let frames: Vec<_> = (0..400)
            .map(|_| {
                let permits = permits.clone();
                tokio::spawn(async move {
                    let permit = permits.acquire(vec![ip(1), ceiling]).await;
                    tokio::task::yield_now().await;
                    permit.is_some()
                })
            })
            .collect();
        for frame in frames {
            assert!(frame.await.unwrap(), "a frame waited out its handler wait with shares free");
        }
        assert!(permits.held.shares().is_empty(), "no entry outlives its permits");
    }

    #[tokio::test]
    async fn the_global_bound_still_holds() {
        let permits = Permits::new(1, 8, Duration::from_millis(20));
        let _held = permits.acquire(vec![ip(1)]).await.unwrap();
        assert!(permits.acquire(vec![ip(2)]).await.is_none());
        assert!(permits.held.shares().get(&ip(2)).is_none(), "a refused frame keeps no share");
    }
}
