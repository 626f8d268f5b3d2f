//! `[sync]`: NIP-77 negentropy sessions' bounds, and the peers the relay keeps in step with.

use serde::{Deserialize, Serialize};

/// `[sync]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// Events one negentropy session may reconcile; a filter that matches more is refused
    /// `NEG-ERR "blocked: too many records"` (strfry's default, 500,000).
    pub max_items: usize,
    /// The largest negentropy message either side sends, in bytes before hex (0: no limit;
    /// otherwise at least 4096). A message is cut at this size and the exchange goes on.
    pub frame_size_limit: u64,
    /// Negentropy sessions one connection may hold open at once (a `NEG-OPEN` of an open id
    /// replaces that session): room for a chat client that lists every room at once (Flotilla
    /// opens 11–21). Each session also takes a place under `server.max_subscriptions_per_ip` and
    /// `server.max_subscriptions_total`, and each `NEG-OPEN` is billed to `ws_reqs`.
    pub max_sessions: usize,
    /// A session that has seen no message for this long is closed (`NEG-ERR "closed: …"`).
    pub idle_secs: u64,
    /// Items all open sessions of every connection may hold together (each about 40 bytes while
    /// its session is open); a NEG-OPEN past it is refused `NEG-ERR "blocked: …"`. At least
    /// `max_items`.
    pub max_items_held: usize,
    /// Relays this one keeps itself in step with, in the background.
    pub peers: Vec<SyncPeer>,
}

impl Default for SyncConfig {
    fn default() -> SyncConfig {
        SyncConfig {
            max_items: 500_000,
            frame_size_limit: 60_000,
            max_sessions: 64,
            idle_secs: 60,
            max_items_held: 2_000_000,
            peers: Vec::new(),
        }
    }
}

/// Why `url` cannot name a sync peer: it must be a `ws://` or `wss://` URL with a host.
pub fn peer_url_problem(url: &str) -> Option<String> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if !matches!(parsed.scheme(), "ws" | "wss") => Some("must start with ws:// or wss://".into()),
        Ok(parsed) if parsed.host_str().is_none_or(str::is_empty) => Some("must name a host".into()),
        // What the WebSocket client will parse it with.
        Ok(_) => url.parse::<tokio_tungstenite::tungstenite::http::Uri>().err().map(|e| format!("is not a URL: {e}")),
        Err(e) => Some(format!("is not a URL: {e}")),
    }
}

/// One `[[sync.peers]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncPeer {
    /// The peer's `ws://` or `wss://` URL.
    pub url: String,
    /// The events to keep in step, a NIP-01 filter as JSON (`{}`: all of them).
    #[serde(default = "every_event")]
    pub filter: String,
    /// Which way events move.
    #[serde(default)]
    pub direction: Direction,
    /// Seconds between the end of one round and the start of the next.
    #[serde(default = "five_minutes")]
    pub interval_secs: u64,
    /// Copy events even where the receiving relay would serve them to anyone while the sending
    /// one keeps them for its members (`hearth sync --allow-public`).
    #[serde(default)]
    pub allow_public: bool,
}

fn every_event() -> String {
    "{}".into()
}

fn five_minutes() -> u64 {
    300
}

/// Which way a sync moves events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Fetch what the peer has and this relay lacks.
    #[default]
    Down,
    /// Publish to the peer what this relay has and it lacks.
    Up,
    /// Both.
    Both,
}

impl Direction {
    /// True when events come down from the peer.
    pub fn down(self) -> bool {
        matches!(self, Direction::Down | Direction::Both)
    }

    /// True when events go up to the peer.
    pub fn up(self) -> bool {
        matches!(self, Direction::Up | Direction::Both)
    }
}

impl std::str::FromStr for Direction {
    type Err = String;

    fn from_str(s: &str) -> Result<Direction, String> {
        match s {
            "down" => Ok(Direction::Down),
            "up" => Ok(Direction::Up),
            "both" => Ok(Direction::Both),
            other => Err(format!("{other:?} is not a direction: down, up or both")),
        }
    }
}
