//! The relay's recent history for the admin page: one sample every [`INTERVAL`] of connections,
//! subscriptions, events stored per second, refusals per second by limit type and the admission
//! p99, the last [`KEPT`] of them (15 minutes) in a ring in memory.
//!
//! Owns the ring and the one counter no other part keeps (events stored); connections and
//! subscriptions are read from the fan-out, refusals and admission times from the limiter's
//! running totals. Rates are differences between consecutive samples, so a sample costs a few
//! atomic reads whatever the traffic.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::fanout::Fanout;
use crate::limiter::{ADMISSION_BUCKETS_US, LimitType, Limiter, TotalsSnapshot};
use crate::protocol::Timestamp;

/// Time between samples.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Samples kept: 15 minutes of them.
pub const KEPT: usize = 180;

/// One sample, as `GET /admin/v1/stats` lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// When it was taken (unix seconds).
    pub at: u64,
    /// Seconds since the previous sample, as measured (0 for the first): each rate is a count
    /// over these seconds, so `rate × secs` gives the count back.
    pub secs: f64,
    /// Open WebSocket connections.
    pub connections: usize,
    /// Open subscriptions.
    pub subscriptions: u64,
    /// Events stored per second since the previous sample.
    pub events_stored_per_sec: f64,
    /// Refusals per second since the previous sample, by limit type.
    pub refusals_per_sec: std::collections::BTreeMap<&'static str, f64>,
    /// The 99th percentile of admission times since the previous sample, as the upper bound of
    /// its bucket in microseconds (`None` when nothing was admitted).
    pub admission_p99_us: Option<u64>,
}

/// What the previous sample read, for the next one's differences.
struct Last {
    taken: Instant,
    stored: u64,
    totals: TotalsSnapshot,
}

/// The ring and the stored-events counter.
#[derive(Default)]
pub struct Stats {
    stored: AtomicU64,
    ring: Mutex<(VecDeque<Sample>, Option<Last>)>,
}

impl Stats {
    /// Counts one event stored.
    pub fn stored(&self) {
        self.stored.fetch_add(1, Ordering::Relaxed);
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner).0.iter().cloned().collect()
    }

    /// Takes a sample now of the connections and subscriptions of `fanout` and the totals of
    /// `limiter`.
    pub fn sample(&self, fanout: &Fanout, limiter: &Limiter) {
        let (connections, subscriptions) = (fanout.connections(), fanout.subscriptions());
        let now = Last { taken: Instant::now(), stored: self.stored.load(Ordering::Relaxed), totals: limiter.totals() };
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let sample = sample_between(ring.1.as_ref(), &now, Timestamp::now().0, connections, subscriptions);
        if ring.0.len() == KEPT {
            ring.0.pop_front();
        }
        ring.0.push_back(sample);
        ring.1 = Some(now);
    }
}

/// The sample `now` makes after `last` (rates of zero and no p99 for the first).
fn sample_between(last: Option<&Last>, now: &Last, at: u64, connections: usize, subscriptions: u64) -> Sample {
    let secs = last.map_or(0.0, |l| now.taken.duration_since(l.taken).as_secs_f64());
    let rate = |now: u64, then: u64| if secs > 0.0 { now.saturating_sub(then) as f64 / secs } else { 0.0 };
    let before = last.map(|l| l.totals).unwrap_or_default();
    let refusals_per_sec = LimitType::ALL
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), if last.is_some() { rate(now.totals.refused[i], before.refused[i]) } else { 0.0 }))
        .collect();
    let admitted: Vec<u64> = (0..ADMISSION_BUCKETS_US.len())
        .map(|i| if last.is_some() { now.totals.admissions[i].saturating_sub(before.admissions[i]) } else { 0 })
        .collect();
    Sample {
        at,
        secs,
        connections,
        subscriptions,
        events_stored_per_sec: last.map_or(0.0, |l| rate(now.stored, l.stored)),
        refusals_per_sec,
        admission_p99_us: p99(&admitted),
    }
}

/// The upper bound of the bucket that holds the 99th percentile of `counts` (per bucket of
/// [`ADMISSION_BUCKETS_US`]); the last bucket, unbounded, is reported as the one before it.
fn p99(counts: &[u64]) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let want = total - total / 100;
    let mut seen = 0;
    for (i, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= want {
            let last_bounded = ADMISSION_BUCKETS_US.len() - 2;
            return Some(ADMISSION_BUCKETS_US[i.min(last_bounded)]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(at: Instant, stored: u64, refused: [u64; LimitType::ALL.len()], admissions: [u64; 12]) -> Last {
        Last { taken: at, stored, totals: TotalsSnapshot { refused, admissions } }
    }

    #[test]
    fn a_sample_is_the_rates_since_the_one_before_and_the_first_has_none() {
        let t0 = Instant::now();
        let first = sample_between(None, &last(t0, 40, [3, 0, 0, 0, 0, 0, 0], [0; 12]), 100, 2, 5);
        assert_eq!((first.events_stored_per_sec, first.admission_p99_us), (0.0, None));
        assert_eq!(first.refusals_per_sec["ws_events"], 0.0);
        let before = last(t0, 40, [3, 0, 0, 1, 0, 0, 0], [0; 12]);
        let mut admissions = [0; 12];
        admissions[2] = 990; // ≤ 5 µs
        admissions[6] = 10; // ≤ 100 µs
        let now = last(t0 + Duration::from_secs(5), 90, [13, 4, 5, 1, 0, 0, 0], admissions);
        let s = sample_between(Some(&before), &now, 105, 3, 7);
        assert_eq!((s.at, s.connections, s.subscriptions), (105, 3, 7));
        assert_eq!(s.events_stored_per_sec, 10.0);
        assert_eq!((s.refusals_per_sec["ws_events"], s.refusals_per_sec["messages"]), (2.0, 1.0));
        assert_eq!(s.refusals_per_sec["ws_reqs"], 0.8);
        assert_eq!(s.refusals_per_sec["api_calls"], 0.0);
        assert_eq!(s.admission_p99_us, Some(5), "990 of 1,000 at ≤ 5 µs: the 99th is there");
        admissions[6] = 11;
        let s = sample_between(
            Some(&before),
            &last(t0 + Duration::from_secs(5), 90, [0; LimitType::ALL.len()], admissions),
            105,
            0,
            0,
        );
        assert_eq!(s.admission_p99_us, Some(100));
    }

    #[test]
    fn the_ring_keeps_the_last_fifteen_minutes() {
        assert_eq!(KEPT as u64 * INTERVAL.as_secs(), 15 * 60);
        assert_eq!(p99(&[0; 12]), None);
        let mut slowest = [0; 12];
        slowest[11] = 1;
        assert_eq!(p99(&slowest), Some(10_000), "the unbounded bucket reports its lower edge");
    }
}
