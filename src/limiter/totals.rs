//! The limiter's running totals since it was made: refusals per limit type and admissions per
//! time bucket, which the admin API's samples turn into rates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::protocol::refusal::LimitType;

/// Upper bounds (µs) of the admission-time buckets the limiter counts for the admin page's
/// p99 (the Prometheus histogram has its own).
pub const ADMISSION_BUCKETS_US: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 10_000, u64::MAX];

/// Running totals since the limiter was made: refusals per limit type and admissions per time
/// bucket, for the admin API's samples (rates are their differences).
#[derive(Default)]
pub(super) struct Totals {
    pub(super) refused: [AtomicU64; LimitType::ALL.len()],
    pub(super) admissions: [AtomicU64; ADMISSION_BUCKETS_US.len()],
}

/// A reading of the limiter's running totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TotalsSnapshot {
    /// Refusals so far, per limit type in the order of [`LimitType::ALL`].
    pub refused: [u64; LimitType::ALL.len()],
    /// Admissions so far, per bucket of [`ADMISSION_BUCKETS_US`].
    pub admissions: [u64; ADMISSION_BUCKETS_US.len()],
}

impl Totals {
    pub(super) fn refused(&self, limit_type: LimitType) {
        if let Some(i) = LimitType::ALL.iter().position(|t| *t == limit_type) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn admitted_in(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket =
            ADMISSION_BUCKETS_US.iter().position(|&bound| us <= bound).unwrap_or(ADMISSION_BUCKETS_US.len() - 1);
        self.admissions[bucket].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn read(&self) -> TotalsSnapshot {
        TotalsSnapshot {
            refused: std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed)),
            admissions: std::array::from_fn(|i| self.admissions[i].load(Ordering::Relaxed)),
        }
    }
}
