//! The quota tiers and quota keys: the one list of their names.
//!
//! Owns [`QuotaKey`], a tier's values ([`TierLimits`]) and [`LimitKey`], the
//! `<tier>.<key>` name the admin API, the saved overrides and the configuration sources use.
//! Every other module names a quota through these types, never through a string.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::protocol::Tier;

/// One quota of a tier: the keys of `[limits.human]` and `[limits.agent]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKey {
    /// `ws_events_per_sec`
    WsEventsPerSec,
    /// `ws_burst_window_secs`
    WsBurstWindowSecs,
    /// `ws_reqs_per_sec`
    WsReqsPerSec,
    /// `ws_reqs_burst_window_secs`
    WsReqsBurstWindowSecs,
    /// `messages_per_min`
    MessagesPerMin,
    /// `api_calls_per_min`
    ApiCallsPerMin,
    /// `upload_bytes_per_day`
    UploadBytesPerDay,
}

impl QuotaKey {
    /// Every key, in report order.
    pub const ALL: [QuotaKey; 7] = [
        QuotaKey::WsEventsPerSec,
        QuotaKey::WsBurstWindowSecs,
        QuotaKey::WsReqsPerSec,
        QuotaKey::WsReqsBurstWindowSecs,
        QuotaKey::MessagesPerMin,
        QuotaKey::ApiCallsPerMin,
        QuotaKey::UploadBytesPerDay,
    ];

    /// The key as written in `relay.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKey::WsEventsPerSec => "ws_events_per_sec",
            QuotaKey::WsBurstWindowSecs => "ws_burst_window_secs",
            QuotaKey::WsReqsPerSec => "ws_reqs_per_sec",
            QuotaKey::WsReqsBurstWindowSecs => "ws_reqs_burst_window_secs",
            QuotaKey::MessagesPerMin => "messages_per_min",
            QuotaKey::ApiCallsPerMin => "api_calls_per_min",
            QuotaKey::UploadBytesPerDay => "upload_bytes_per_day",
        }
    }

    /// The key named `name`.
    pub fn parse(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The largest value the key takes: far above any real relay's need, and low enough that
    /// the limiter's arithmetic and what NIP-11 advertises stay meaningful (a value of 2^64 − 1
    /// was taken once, and advertised).
    pub fn max(self) -> u64 {
        match self {
            QuotaKey::WsEventsPerSec | QuotaKey::WsReqsPerSec => 10_000_000,
            QuotaKey::WsBurstWindowSecs | QuotaKey::WsReqsBurstWindowSecs => 3_600,
            QuotaKey::MessagesPerMin | QuotaKey::ApiCallsPerMin => 1_000_000_000,
            // 1 PiB a day.
            QuotaKey::UploadBytesPerDay => 1 << 50,
        }
    }
}

/// One tier's quotas (`[limits.human]`, `[limits.agent]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TierLimits {
    /// Sustained WebSocket frames that write (EVENT, NEG-MSG) per second.
    pub ws_events_per_sec: u64,
    /// Burst of those frames = `ws_events_per_sec × ws_burst_window_secs`.
    pub ws_burst_window_secs: u64,
    /// Sustained WebSocket frames that read (REQ, COUNT, NEG-OPEN) per second.
    pub ws_reqs_per_sec: u64,
    /// Burst of those frames = `ws_reqs_per_sec × ws_reqs_burst_window_secs`.
    pub ws_reqs_burst_window_secs: u64,
    /// Durable events per minute (burst of that many, refilling over a minute).
    pub messages_per_min: u64,
    /// REST calls per minute (burst of that many, refilling over a minute).
    pub api_calls_per_min: u64,
    /// Bytes uploaded to the media server per day (a day's worth at once, refilling over a day;
    /// billed in whole KiB).
    pub upload_bytes_per_day: u64,
}

impl TierLimits {
    /// The value of `key`.
    pub fn get(&self, key: QuotaKey) -> u64 {
        match key {
            QuotaKey::WsEventsPerSec => self.ws_events_per_sec,
            QuotaKey::WsBurstWindowSecs => self.ws_burst_window_secs,
            QuotaKey::WsReqsPerSec => self.ws_reqs_per_sec,
            QuotaKey::WsReqsBurstWindowSecs => self.ws_reqs_burst_window_secs,
            QuotaKey::MessagesPerMin => self.messages_per_min,
            QuotaKey::ApiCallsPerMin => self.api_calls_per_min,
            QuotaKey::UploadBytesPerDay => self.upload_bytes_per_day,
        }
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: QuotaKey, value: u64) {
        match key {
            QuotaKey::WsEventsPerSec => self.ws_events_per_sec = value,
            QuotaKey::WsBurstWindowSecs => self.ws_burst_window_secs = value,
            QuotaKey::WsReqsPerSec => self.ws_reqs_per_sec = value,
            QuotaKey::WsReqsBurstWindowSecs => self.ws_reqs_burst_window_secs = value,
            QuotaKey::MessagesPerMin => self.messages_per_min = value,
            QuotaKey::ApiCallsPerMin => self.api_calls_per_min = value,
            QuotaKey::UploadBytesPerDay => self.upload_bytes_per_day = value,
        }
    }
}

impl Default for TierLimits {
    fn default() -> Self {
        TierLimits {
            ws_events_per_sec: 10,
            ws_burst_window_secs: 5,
            ws_reqs_per_sec: 10,
            ws_reqs_burst_window_secs: 10,
            messages_per_min: 120,
            api_calls_per_min: 60,
            upload_bytes_per_day: 1 << 30,
        }
    }
}

impl TierLimits {
    /// The IP ceiling's defaults: 4 × the human rates, over the same burst window.
    pub fn ip_default() -> TierLimits {
        let human = TierLimits::default();
        TierLimits {
            ws_events_per_sec: 4 * human.ws_events_per_sec,
            ws_burst_window_secs: human.ws_burst_window_secs,
            ws_reqs_per_sec: 4 * human.ws_reqs_per_sec,
            ws_reqs_burst_window_secs: human.ws_reqs_burst_window_secs,
            messages_per_min: 4 * human.messages_per_min,
            api_calls_per_min: 4 * human.api_calls_per_min,
            upload_bytes_per_day: 4 * human.upload_bytes_per_day,
        }
    }
}

/// One quota of one tier, named `<tier>.<key>` (e.g. `human.ws_events_per_sec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LimitKey {
    /// The tier.
    pub tier: Tier,
    /// The quota.
    pub key: QuotaKey,
}

impl LimitKey {
    /// Every quota of every tier, in report order.
    pub fn all() -> impl Iterator<Item = LimitKey> {
        Tier::ALL.into_iter().flat_map(|tier| QuotaKey::ALL.into_iter().map(move |key| LimitKey { tier, key }))
    }
}

impl fmt::Display for LimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.tier.as_str(), self.key.as_str())
    }
}

impl FromStr for LimitKey {
    type Err = String;

    fn from_str(s: &str) -> Result<LimitKey, String> {
        let (tier, key) = s.split_once('.').ok_or_else(|| format!("`{s}` is not <tier>.<key>"))?;
        let tier = Tier::parse(tier).ok_or_else(|| format!("unknown tier `{tier}` (expected human, agent or ip)"))?;
        let key = QuotaKey::parse(key).ok_or_else(|| format!("unknown limit `{s}`"))?;
        Ok(LimitKey { tier, key })
    }
}

impl Serialize for LimitKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LimitKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LimitKey, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a configuration value came from (admin overrides are tracked by the admin module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The built-in default (or a file value equal to it).
    Default,
    /// The configuration file.
    Config,
    /// A `HEARTH_…` environment variable.
    Env,
    /// Set live through the admin API.
    Admin,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_keys_round_trip_through_their_names() {
        let names: Vec<String> = LimitKey::all().map(|k| k.to_string()).collect();
        assert_eq!(names.len(), 21);
        assert_eq!(names[0], "human.ws_events_per_sec");
        assert_eq!(names[2], "human.ws_reqs_per_sec");
        assert_eq!(names[3], "human.ws_reqs_burst_window_secs");
        assert_eq!(names[6], "human.upload_bytes_per_day");
        assert_eq!(names[12], "agent.api_calls_per_min");
        assert_eq!(names[14], "ip.ws_events_per_sec");
        for name in &names {
            assert_eq!(&name.parse::<LimitKey>().unwrap().to_string(), name);
        }
        assert!("robot.ws_events_per_sec".parse::<LimitKey>().unwrap_err().contains("robot"));
        assert!("human.nope".parse::<LimitKey>().unwrap_err().contains("human.nope"));
    }

    #[test]
    fn every_key_reads_back_what_was_set() {
        let mut t = TierLimits::default();
        for (i, key) in QuotaKey::ALL.into_iter().enumerate() {
            t.set(key, 100 + i as u64);
        }
        let got: Vec<u64> = QuotaKey::ALL.iter().map(|k| t.get(*k)).collect();
        assert_eq!(got, [100, 101, 102, 103, 104, 105, 106]);
    }
}
