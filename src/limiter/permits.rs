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

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::principal::Principal;

/// Permits held per key (a principal, or an IP ceiling); an entry exists only while it holds one.
#[derive(Default)]
struct Held {
    counts: Mutex<HashMap<Principal, usize>>,
    /// Woken whenever a permit is given back.
    released: Notify,
}

impl Held {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<Principal, usize>> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one share for every key when each is under `cap`; false (nothing taken) otherwise.
    fn try_take(&self, keys: &[Principal], cap: usize) -> bool {
        let mut counts = self.counts();
        if keys.iter().any(|k| counts.get(k).copied().unwrap_or(0) >= cap) {
            return false;
        }
        for k in keys {
            *counts.entry(*k).or_insert(0) += 1;
        }
        true
    }

    fn give_back(&self, keys: &[Principal]) {
        let mut counts = self.counts();
        for k in keys {
            if let Some(n) = counts.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(k);
                }
            }
        }
        drop(counts);
        self.released.notify_waiters();
    }
}

/// One held handler permit; dropping it gives the permit and its shares back.
pub struct HandlerPermit {
    _global: OwnedSemaphorePermit,
    held: Arc<Held>,
    keys: Vec<Principal>,
}

impl std::fmt::Debug for HandlerPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerPermit").field("keys", &self.keys).finish()
    }
}

impl Drop for HandlerPermit {
    fn drop(&mut self) {
        self.held.give_back(&self.keys);
    }
}

/// The relay's handler permits.
pub(super) struct Permits {
    global: Arc<Semaphore>,
    held: Arc<Held>,
    per_key: usize,
    wait: Duration,
}

impl Permits {
    pub(super) fn new(total: usize, per_key: usize, wait: Duration) -> Permits {
        Permits { global: Arc::new(Semaphore::new(total)), held: Arc::default(), per_key, wait }
    }

    /// A permit for work billed to every one of `keys`, waiting at most the handler wait for
    /// both the keys' shares and a global permit; `None` when none came in time.
    pub(super) async fn acquire(&self, keys: Vec<Principal>) -> Option<HandlerPermit> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            // Registered before the check, so a release between the check and the wait wakes it.
            let released = self.held.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.held.try_take(&keys, self.per_key) {
                break;
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return None;
            }
        }
        match tokio::time::timeout_at(deadline, self.global.clone().acquire_owned()).await {
            Ok(Ok(global)) => Some(HandlerPermit { _global: global, held: self.held.clone(), keys }),
            _ => {
                self.held.give_back(&keys);
                None
            }
        }
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
        assert!(permits.held.counts().is_empty(), "no entry outlives its permits");
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

    /// Hundreds of frames of one principal wait on its share of two; each share given back is
    /// taken by one of them, so every one gets a permit (none is left asleep while a share is
    /// free) and the table is empty after.
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
        assert!(permits.held.counts().is_empty(), "no entry outlives its permits");
    }

    #[tokio::test]
    async fn the_global_bound_still_holds() {
        let permits = Permits::new(1, 8, Duration::from_millis(20));
        let _held = permits.acquire(vec![ip(1)]).await.unwrap();
        assert!(permits.acquire(vec![ip(2)]).await.is_none());
        assert!(permits.held.counts().get(&ip(2)).is_none(), "a refused frame keeps no share");
    }
}
