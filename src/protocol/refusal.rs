//! Why a frame was refused: the one vocabulary every transport maps to its wire.
//!
//! Owns the NIP-01 machine-readable [`Prefix`], the stable [`LimitType`] names, a rate limit's
//! exact retry time ([`RateLimited`]) and the [`Refusal`] that carries either. WebSocket turns a
//! refusal into `OK false` / `CLOSED` / `NOTICE`, HTTP into a status code, a JSON `error` and
//! `Retry-After`; both use the same text, built here and nowhere else.

use std::fmt;
use std::time::Duration;

/// The machine-readable prefix of a refusal (NIP-01), shown as `"<prefix>: "`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefix {
    /// `invalid:`
    Invalid,
    /// `duplicate:`
    Duplicate,
    /// `blocked:`
    Blocked,
    /// `rate-limited:`
    RateLimited,
    /// `restricted:`
    Restricted,
    /// `auth-required:`
    AuthRequired,
    /// `error:`
    Error,
}

impl Prefix {
    /// The prefix text, without the colon.
    pub fn as_str(self) -> &'static str {
        match self {
            Prefix::Invalid => "invalid",
            Prefix::Duplicate => "duplicate",
            Prefix::Blocked => "blocked",
            Prefix::RateLimited => "rate-limited",
            Prefix::Restricted => "restricted",
            Prefix::AuthRequired => "auth-required",
            Prefix::Error => "error",
        }
    }
}

/// What is billed. The names are stable: they appear in messages, metrics and the admin API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitType {
    /// Frames on a WebSocket that write (EVENT, NEG-MSG, and any frame that cannot be read), on
    /// arrival.
    WsEvents,
    /// Frames on a WebSocket that read (REQ, COUNT, NEG-OPEN), on arrival: a budget of their own,
    /// so a client's subscriptions never delay its writes, nor its writes its subscriptions.
    WsReqs,
    /// Durable (non-ephemeral) events, after verification and the duplicate check.
    Messages,
    /// REST calls (and Blossom calls).
    ApiCalls,
    /// Bytes uploaded to the media server (Blossom), per day; billed before the body is read.
    UploadBytes,
    /// Failed admin API credentials, per client IP (a fixed quota, not per tier).
    AdminAuth,
    /// The global bound on concurrently handled work.
    Unavailable,
}

impl LimitType {
    /// Every limit type, in report order.
    pub const ALL: [LimitType; 7] = [
        LimitType::WsEvents,
        LimitType::WsReqs,
        LimitType::Messages,
        LimitType::ApiCalls,
        LimitType::UploadBytes,
        LimitType::AdminAuth,
        LimitType::Unavailable,
    ];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitType::WsEvents => "ws_events",
            LimitType::WsReqs => "ws_reqs",
            LimitType::Messages => "messages",
            LimitType::ApiCalls => "api_calls",
            LimitType::UploadBytes => "upload_bytes",
            LimitType::AdminAuth => "admin_auth",
            LimitType::Unavailable => "unavailable",
        }
    }
}

/// A rate limit's refusal with its exact retry time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    /// Which limit refused.
    pub limit_type: LimitType,
    /// How long until the same request would be admitted (given no other traffic).
    pub retry_after: Duration,
}

impl RateLimited {
    /// Whole seconds to wait: rounded up, at least 1 (clients mishandle 0).
    pub fn retry_secs(&self) -> u64 {
        let nanos = u64::try_from(self.retry_after.as_nanos()).unwrap_or(u64::MAX);
        nanos.div_ceil(1_000_000_000).max(1)
    }

    /// `"quota"` or `"unavailable"`: the metric's `reason` label.
    pub fn reason(&self) -> &'static str {
        if self.limit_type == LimitType::Unavailable { "unavailable" } else { "quota" }
    }

    /// The text after `rate-limited: `, e.g. `quota exceeded (messages); retry in 12s`.
    pub fn text(&self) -> String {
        let what = if self.limit_type == LimitType::Unavailable { "relay busy" } else { "quota exceeded" };
        format!("{what} ({}); retry in {}s", self.limit_type.as_str(), self.retry_secs())
    }
}

impl fmt::Display for RateLimited {
    /// The full message, e.g. `rate-limited: quota exceeded (messages); retry in 12s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", Prefix::RateLimited.as_str(), self.text())
    }
}

impl std::error::Error for RateLimited {}

/// Why the limiter did not admit a request: a quota (with its exact retry time), or its shared
/// store unreachable under `limits.redis_unavailable = "refuse"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// A quota or the handler bound refused it.
    Limited(RateLimited),
    /// The shared quota store (Redis) could not be reached, and the relay refuses rather than
    /// bill by one node alone.
    Unavailable,
}

impl Denied {
    /// The text after `error: ` of [`Denied::Unavailable`].
    pub const UNAVAILABLE: &str = "the relay's shared quota store is unavailable; try again shortly";
}

impl From<RateLimited> for Denied {
    fn from(limited: RateLimited) -> Denied {
        Denied::Limited(limited)
    }
}

impl fmt::Display for Denied {
    /// The full message: `rate-limited: …` or `error: …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Limited(limited) => limited.fmt(f),
            Denied::Unavailable => write!(f, "{}: {}", Prefix::Error.as_str(), Denied::UNAVAILABLE),
        }
    }
}

impl From<Denied> for Refusal {
    fn from(denied: Denied) -> Refusal {
        match denied {
            Denied::Limited(limited) => Refusal::RateLimited(limited),
            Denied::Unavailable => Refusal::new(Prefix::Error, Denied::UNAVAILABLE),
        }
    }
}

/// Why a frame or call was refused, shown as `"<prefix>: <text>"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Refused for what it is or who sent it.
    Rejected {
        /// Category.
        prefix: Prefix,
        /// Human-readable reason.
        text: String,
    },
    /// Refused by the limiter; the same request is admitted after the retry time.
    RateLimited(RateLimited),
}

impl Refusal {
    /// A refusal with `prefix` and `text`.
    pub fn new(prefix: Prefix, text: impl Into<String>) -> Refusal {
        Refusal::Rejected { prefix, text: text.into() }
    }

    /// The category.
    pub fn prefix(&self) -> Prefix {
        match self {
            Refusal::Rejected { prefix, .. } => *prefix,
            Refusal::RateLimited(_) => Prefix::RateLimited,
        }
    }
}

impl From<RateLimited> for Refusal {
    fn from(limited: RateLimited) -> Refusal {
        Refusal::RateLimited(limited)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Rejected { prefix, text } => write!(f, "{}: {text}", prefix.as_str()),
            Refusal::RateLimited(limited) => limited.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_texts_are_exact_and_retry_is_rounded_up_to_at_least_one() {
        let r = RateLimited { limit_type: LimitType::Messages, retry_after: Duration::from_millis(11_200) };
        assert_eq!(r.to_string(), "rate-limited: quota exceeded (messages); retry in 12s");
        let r = RateLimited { limit_type: LimitType::Unavailable, retry_after: Duration::from_secs(1) };
        assert_eq!(r.to_string(), "rate-limited: relay busy (unavailable); retry in 1s");
        let r = RateLimited { limit_type: LimitType::WsEvents, retry_after: Duration::from_nanos(1) };
        assert_eq!(r.retry_secs(), 1);
        let r = RateLimited { limit_type: LimitType::WsEvents, retry_after: Duration::ZERO };
        assert_eq!(r.retry_secs(), 1);
    }

    #[test]
    fn refusals_show_their_prefix_with_a_space() {
        assert_eq!(Refusal::new(Prefix::Blocked, "banned").to_string(), "blocked: banned");
        let limited = RateLimited { limit_type: LimitType::ApiCalls, retry_after: Duration::from_secs(3) };
        assert_eq!(Refusal::from(limited).prefix(), Prefix::RateLimited);
    }
}
