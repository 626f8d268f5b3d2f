//! One budget the relay bills the client's requests to, as the client keeps it: the gate a
//! refusal arms and the pace the relay advertises.
//!
//! A WebSocket session has two when the relay bills reads and writes apart (hearth's `ws_reqs`
//! and `ws_events`): a refused REQ then holds back only the reads, and the writes keep their own
//! pace. Otherwise (REST, a relay that advertises one budget) one lane carries both.

use std::time::{Duration, Instant};

use super::vocabulary::Pace;

/// A gate and a pace.
#[derive(Debug, Default)]
pub(super) struct Lane {
    gate_until: Option<Instant>,
    pace: Option<Pace>,
    tokens: f64,
    refilled_at: Option<Instant>,
}

impl Lane {
    /// A lane at `pace` (`None`: unpaced), its burst available at once.
    pub(super) fn new(pace: Option<Pace>) -> Lane {
        Lane { tokens: pace.map_or(0.0, |p| p.burst), pace, ..Lane::default() }
    }

    /// Paces at `pace` from now, keeping no more of the burst than it allows.
    pub(super) fn set_pace(&mut self, pace: Pace) {
        self.tokens = self.tokens.min(pace.burst);
        self.pace = Some(pace);
    }

    /// Paces at `pace` with `sent` requests already billed against its burst.
    pub(super) fn set_pace_after(&mut self, pace: Pace, sent: u64) {
        self.tokens = (pace.burst - sent as f64).max(0.0);
        self.pace = Some(pace);
    }

    /// When the gate opens, if it is armed.
    pub(super) fn gate(&self) -> Option<Instant> {
        self.gate_until
    }

    /// Arms the gate for `wait` from `now` (never shortening it); true when it was open.
    pub(super) fn arm(&mut self, now: Instant, wait: Duration) -> bool {
        let was_open = self.gate_until.is_none_or(|g| g <= now);
        let until = now + wait;
        self.gate_until = Some(self.gate_until.map_or(until, |g| g.max(until)));
        was_open
    }

    /// Forgets a gate that has opened by `now`.
    pub(super) fn tick(&mut self, now: Instant) {
        if self.gate_until.is_some_and(|g| g <= now) {
            self.gate_until = None;
        }
    }

    /// True when the gate lets a request through and the pace has a token for it now (taken).
    pub(super) fn take(&mut self, now: Instant) -> bool {
        if self.gate_until.is_some() {
            return false;
        }
        let Some(pace) = self.pace else { return true };
        let elapsed = self.refilled_at.map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.tokens = (self.tokens + elapsed * pace.per_sec).min(pace.burst);
        self.refilled_at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When a request waiting in this lane could go (its gate, else its next token), if one waits.
    pub(super) fn wakeup(&self, now: Instant, waiting: bool) -> Option<Instant> {
        if let Some(gate) = self.gate_until {
            return Some(gate);
        }
        match self.pace {
            Some(p) if waiting && self.tokens < 1.0 => {
                Some(now + Duration::from_secs_f64((1.0 - self.tokens) / p.per_sec))
            }
            _ => None,
        }
    }
}
