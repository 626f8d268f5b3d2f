//! GCRA (generic cell rate algorithm): one timestamp per principal and quota, exact retry times.
//!
//! Pure arithmetic on nanoseconds, unit-tested. A quota is a sustained rate (one cell every
//! `interval`) with a burst of `burst` cells. The state is the theoretical arrival time `tat`: a
//! cell arriving at `now` is admitted when `now >= tat - tolerance`, where
//! `tolerance = interval × (burst − 1)`; it then moves `tat` to `max(tat, now) + interval`. A
//! refused cell learns exactly when it would be admitted. Unlike a fixed window, a burst at a
//! window edge cannot get double.

/// Nanoseconds per second.
pub const NANOS: u64 = 1_000_000_000;

/// A quota: `burst` cells at once, refilling one cell every `interval_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Nanoseconds per cell at the sustained rate.
    pub interval_ns: u64,
    /// Cells admitted back to back from a full bucket.
    pub burst: u64,
}

impl Quota {
    /// `count` cells per `period_secs`, burst `burst`.
    pub fn new(count: u64, period_secs: u64, burst: u64) -> Quota {
        let count = count.max(1);
        Quota { interval_ns: (period_secs.saturating_mul(NANOS) / count).max(1), burst: burst.max(1) }
    }

    fn tolerance(&self) -> u64 {
        self.interval_ns.saturating_mul(self.burst - 1)
    }

    /// Time for an empty bucket to refill completely.
    pub fn window_ns(&self) -> u64 {
        self.interval_ns.saturating_mul(self.burst)
    }

    /// Tries to admit one cell at `now`. `Ok(new_tat)` or `Err(nanoseconds until admitted)`.
    pub fn check(&self, tat: u64, now: u64) -> Result<u64, u64> {
        let allow_at = tat.saturating_sub(self.tolerance());
        if now < allow_at {
            return Err(allow_at - now);
        }
        Ok(tat.max(now).saturating_add(self.interval_ns))
    }

    /// Tries to admit `n` cells at once at `now` (`n` = 1 is [`Quota::check`]): admitted when
    /// the bucket holds `n` free cells. More than `burst` cells are never admitted (`u64::MAX`):
    /// the caller refuses those as too large, since no wait would be true.
    pub fn check_n(&self, tat: u64, now: u64, n: u64) -> Result<u64, u64> {
        if n > self.burst {
            return Err(u64::MAX);
        }
        let extra = self.interval_ns.saturating_mul(n.saturating_sub(1));
        let allow_at = tat.saturating_add(extra).saturating_sub(self.tolerance());
        if now < allow_at {
            return Err(allow_at - now);
        }
        Ok(tat.max(now).saturating_add(self.interval_ns.saturating_mul(n)))
    }

    /// Cells of the burst in use at `now` (0 = full bucket).
    pub fn used(&self, tat: u64, now: u64) -> u64 {
        let ahead = tat.saturating_sub(now);
        ahead.div_ceil(self.interval_ns).min(self.burst)
    }

    /// Carries a `tat` computed under `from` (another interval) over to this quota, keeping the
    /// number of cells in use: a limit changed live neither forgives nor invents debt.
    pub fn rescale(&self, tat: u64, now: u64, from_interval_ns: u64) -> u64 {
        if tat <= now || from_interval_ns == self.interval_ns || from_interval_ns == 0 {
            return tat;
        }
        let ahead = u128::from(tat - now) * u128::from(self.interval_ns) / u128::from(from_interval_ns);
        now.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
    }

    /// Nanoseconds until one more cell would be admitted (0 = now).
    pub fn wait(&self, tat: u64, now: u64) -> u64 {
        self.check(tat, now).err().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_sustained_rate() {
        // 10/s, burst 50.
        let q = Quota::new(10, 1, 50);
        let mut tat = 0;
        let now = 1_000 * NANOS;
        for _ in 0..50 {
            tat = q.check(tat, now).unwrap();
        }
        let wait = q.check(tat, now).unwrap_err();
        assert_eq!(wait, NANOS / 10);
        // Exactly at the hinted time it is admitted; a nanosecond earlier it is not.
        assert!(q.check(tat, now + wait - 1).is_err());
        assert!(q.check(tat, now + wait).is_ok());
    }

    #[test]
    fn per_minute_quota_refills_one_cell_at_a_time() {
        // 120/min: one every 0.5 s, burst 120.
        let q = Quota::new(120, 60, 120);
        let mut tat = 0;
        for _ in 0..120 {
            tat = q.check(tat, 0).unwrap();
        }
        assert_eq!(q.used(tat, 0), 120);
        assert_eq!(q.check(tat, 0).unwrap_err(), NANOS / 2);
        assert_eq!(q.used(tat, 30 * NANOS), 60);
        assert_eq!(q.used(tat, 60 * NANOS), 0);
    }

    #[test]
    fn several_cells_at_once_wait_for_all_of_them() {
        // 100 per 100 s (one a second), burst 100.
        let q = Quota::new(100, 100, 100);
        let tat = q.check_n(0, 0, 60).unwrap();
        assert_eq!(q.used(tat, 0), 60);
        // 40 left: 40 pass, 41 wait one second, exactly.
        assert!(q.check_n(tat, 0, 40).is_ok());
        assert_eq!(q.check_n(tat, 0, 41).unwrap_err(), NANOS);
        assert!(q.check_n(tat, NANOS, 41).is_ok());
        // One cell at a time agrees with check.
        assert_eq!(q.check_n(tat, 0, 1), q.check(tat, 0));
        // More than the burst never passes.
        assert_eq!(q.check_n(0, 0, 101).unwrap_err(), u64::MAX);
    }

    #[test]
    fn no_double_burst_at_a_window_edge() {
        let q = Quota::new(10, 1, 10);
        let mut tat = 0;
        let edge = 5 * NANOS;
        let mut admitted = 0;
        for now in [edge - 1, edge, edge + 1] {
            for _ in 0..20 {
                if let Ok(t) = q.check(tat, now) {
                    tat = t;
                    admitted += 1;
                }
            }
        }
        assert_eq!(admitted, 10);
    }

    #[test]
    fn rescaling_keeps_the_cells_in_use() {
        let slow = Quota::new(3, 60, 3); // one cell per 20 s
        let fast = Quota::new(100, 60, 100); // one cell per 0.6 s
        let mut tat = 0;
        for _ in 0..3 {
            tat = slow.check(tat, 0).unwrap();
        }
        assert_eq!(slow.used(tat, 0), 3);
        let carried = fast.rescale(tat, 0, slow.interval_ns);
        assert_eq!(fast.used(carried, 0), 3);
        assert!(fast.check(carried, 0).is_ok());
    }
}
