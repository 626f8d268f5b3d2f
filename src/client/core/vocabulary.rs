//! What the core takes and gives: the replies it reads (whichever transport carried them), the
//! updates, errors and progress it reports to callers, the pace it keeps, and the `retry in Ns`
//! hint it reads out of a refusal.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::protocol::{EventId, Tier};

/// Parses the `retry in Ns` hint of a `rate-limited:` message.
pub fn retry_hint(message: &str) -> Option<Duration> {
    if !message.starts_with("rate-limited:") {
        return None;
    }
    let rest = &message[message.rfind("retry in ")? + "retry in ".len()..];
    let secs: u64 = rest.trim_end_matches('s').trim().parse().ok()?;
    Some(Duration::from_secs(secs.max(1)))
}

/// Why a publish failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The relay refused it (`OK false`), with its message.
    #[error("{0}")]
    Refused(String),
    /// No accepted OK before the publish timeout.
    #[error("timed out waiting for the relay")]
    Timeout,
    /// The connection closed or was reset before the OK.
    #[error("connection lost: {0}")]
    Disconnected(String),
}

/// What happened, for the session to hand to its callers.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A publish finished: `Ok(message)` (`""` or `duplicate: …`) or why not.
    Published(EventId, Result<String, PublishError>),
    /// A stored or live event for a subscription.
    Event(String, Value),
    /// End of stored events for a subscription.
    Eose(String),
    /// The relay closed a subscription (not for rate limits: those are re-issued).
    Closed(String, String),
    /// A COUNT answer.
    Count(String, u64),
    /// A NOTICE.
    Notice(String),
}

/// The outbound rate: `burst` frames at once, refilling at `per_sec`.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Sustained frames per second.
    pub per_sec: f64,
    /// Frames that may go back to back.
    pub burst: f64,
}

/// Share of an advertised rate the client paces at: requests bunched by the network must not
/// arrive faster than the relay admits them once the burst is spent.
const PACE_MARGIN: f64 = 0.9;

/// Which quota a transport's requests are billed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// EVENT frames: `ws_events`, `ws_events_per_sec` with a burst window (every frame, on a
    /// relay that advertises no `ws_reqs`).
    WebSocket,
    /// REQ and COUNT frames: `ws_reqs`, `ws_reqs_per_sec` with a burst window; `None` from
    /// [`Pace::advertised`] when the relay bills them with the writes.
    WebSocketReads,
    /// REST calls: `api_calls`, `api_calls_per_min` with a burst of as many.
    Rest,
}

impl Pace {
    /// The pace for `transport` at `tier` from a relay's NIP-11 document (`hearth_limits`): a
    /// little under the lower of the tier's quota and the IP ceiling's, which every request of
    /// the address is billed to as well. `None` when the relay advertises no limits.
    pub fn advertised(nip11: &Value, tier: Tier, transport: Transport) -> Option<Pace> {
        let limits = &nip11["hearth_limits"];
        let of = |tier: Tier| -> Option<(f64, f64)> {
            let t = &limits[tier.as_str()];
            match transport {
                Transport::WebSocket => {
                    let per_sec = t["ws_events_per_sec"].as_f64()?;
                    Some((per_sec, per_sec * t["ws_burst_window_secs"].as_f64().unwrap_or(1.0)))
                }
                Transport::WebSocketReads => {
                    let per_sec = t["ws_reqs_per_sec"].as_f64()?;
                    Some((per_sec, per_sec * t["ws_reqs_burst_window_secs"].as_f64().unwrap_or(1.0)))
                }
                Transport::Rest => {
                    let per_min = t["api_calls_per_min"].as_f64()?;
                    Some((per_min / 60.0, per_min))
                }
            }
        };
        let (mut per_sec, mut burst) = of(tier)?;
        if let Some((ip_rate, ip_burst)) = of(Tier::Ip) {
            per_sec = per_sec.min(ip_rate);
            burst = burst.min(ip_burst);
        }
        if per_sec <= 0.0 {
            return None;
        }
        Some(Pace { per_sec: per_sec * PACE_MARGIN, burst: (burst - 1.0).max(1.0) })
    }
}

/// What the relay's reply is about, when it names a wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A published event.
    Event(EventId),
    /// A subscription or COUNT, by its id.
    Sub(String),
}

/// A relay's answer, whatever transport carried it: the WebSocket session parses frames into
/// these, the REST session maps HTTP responses onto them, and the rules are the same.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// An event's verdict (`OK`, or a REST publish answer that names no wait).
    Ok {
        /// The event.
        id: EventId,
        /// Stored (or a duplicate).
        accepted: bool,
        /// The relay's message.
        message: String,
    },
    /// A refusal that names how long to wait: `rate-limited: …; retry in Ns`, or HTTP 429/503
    /// with `Retry-After: N`.
    Limited {
        /// What was refused.
        target: Target,
        /// The relay's message.
        message: String,
        /// How long the relay asks the client to wait.
        wait: Duration,
    },
    /// A subscription or COUNT ended by the relay (or refused without a wait).
    Closed {
        /// Its id.
        sub: String,
        /// The relay's message.
        message: String,
    },
    /// A stored or live event for a subscription.
    Event(String, Value),
    /// End of stored events.
    Eose(String),
    /// A COUNT answer.
    Count(String, u64),
    /// A NOTICE.
    Notice(String),
    /// A NIP-42 challenge.
    Auth(String),
}

impl Reply {
    /// A relay frame as a reply; `None` for what is not a relay frame.
    pub fn parse(text: &str) -> Option<Reply> {
        let Ok(Value::Array(frame)) = serde_json::from_str::<Value>(text) else { return None };
        let s = |i: usize| frame.get(i).and_then(Value::as_str).unwrap_or("").to_string();
        Some(match frame.first().and_then(Value::as_str)? {
            "OK" => {
                let id = EventId::from_hex(&s(1))?;
                let accepted = frame.get(2).and_then(Value::as_bool).unwrap_or(false);
                let message = s(3);
                match retry_hint(&message) {
                    Some(wait) if !accepted => Reply::Limited { target: Target::Event(id), message, wait },
                    _ => Reply::Ok { id, accepted, message },
                }
            }
            "CLOSED" => {
                let (sub, message) = (s(1), s(2));
                match retry_hint(&message) {
                    Some(wait) => Reply::Limited { target: Target::Sub(sub), message, wait },
                    None => Reply::Closed { sub, message },
                }
            }
            "NOTICE" => Reply::Notice(s(1)),
            "AUTH" => Reply::Auth(s(1)),
            "EVENT" => Reply::Event(s(1), frame.get(2).cloned().unwrap_or(Value::Null)),
            "EOSE" => Reply::Eose(s(1)),
            "COUNT" => Reply::Count(s(1), frame.get(2).and_then(|c| c["count"].as_u64()).unwrap_or(0)),
            _ => return None,
        })
    }
}

/// What the client has done so far, for a progress line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Requests sent (EVENT, REQ, COUNT, or REST calls), resends included.
    pub sent: u64,
    /// Events the relay accepted (duplicates included).
    pub accepted: u64,
    /// Requests that failed for good.
    pub refused: u64,
    /// Refusals that named a wait (each armed the gate or found it armed).
    pub limited: u64,
    /// Times the gate was armed while it was open.
    pub gate_waits: u64,
    /// When the gate opens, if it is armed.
    pub gate_until: Option<Instant>,
}
