//! Configuration: built-in defaults → `relay.toml` → `HEARTH_<SECTION>__<KEY>` environment.
//!
//! Owns the config structs (every section refuses unknown keys), the layering, and `validate()`,
//! which names the offending key. The repository's `relay.toml` is embedded in the binary as the
//! base layer, so the binary runs the same with or without the file beside it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::PubKey;

/// The repository's `relay.toml`, the documented defaults.
pub const EMBEDDED_RELAY_TOML: &str = include_str!("../relay.toml");

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A layer could not be read or does not fit the structs (unknown key, wrong type).
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    /// A value is out of range; names the key.
    #[error("configuration: `{key}` {problem}")]
    Invalid {
        /// The dotted key, e.g. `server.bind`.
        key: String,
        /// What is wrong with its value.
        problem: String,
    },
}

fn invalid(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.to_string(), problem: problem.into() }
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

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`
    pub server: ServerConfig,
    /// `[storage]`
    pub storage: StorageConfig,
    /// `[limitation]`: NIP-11 limitation values, enforced and advertised.
    pub limitation: Limitation,
    /// `[info]`: NIP-11 relay information.
    pub info: Info,
    /// `[limits]`: the shared admission limiter's quotas.
    pub limits: LimitsConfig,
    /// `[auth]`: NIP-42 requirements and client address trust.
    pub auth: AuthConfig,
    /// `[admin]`: the admin API.
    pub admin: AdminConfig,
    /// Where each tier limit (`limits.<tier>.<key>`) came from; absent = default.
    #[serde(skip)]
    pub sources: BTreeMap<String, Source>,
}

/// `[admin]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// A separate address for the admin API (e.g. `127.0.0.1:7778`); empty = the relay's port.
    pub bind: String,
    /// Bearer token for the admin API; empty = no token access.
    pub token: String,
    /// Pubkeys (hex or npub) allowed to use the admin API and NIP-86 with NIP-98 auth.
    pub pubkeys: Vec<String>,
}

impl AdminConfig {
    /// True when some credential is configured; otherwise the admin API is off.
    pub fn enabled(&self) -> bool {
        !self.token.is_empty() || !self.pubkeys.is_empty()
    }
}

/// `[server]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on.
    pub bind: String,
    /// The relay's public `ws(s)://` URL; empty = unknown.
    pub public_url: String,
    /// Outbound frames queued per connection before a non-reading client is cut off.
    pub max_outbound_queue: usize,
    /// Frames handled concurrently per connection (EVENTs awaiting their OK, queries running).
    pub max_in_flight: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:7777".into(),
            public_url: String::new(),
            max_outbound_queue: 1024,
            max_in_flight: 256,
        }
    }
}

impl ServerConfig {
    /// The parsed bind address (validated at load).
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.bind.parse().map_err(|e| invalid("server.bind", format!("is not an address like 127.0.0.1:7777 ({e})")))
    }
}

/// `[storage]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Directory of the store: the sled database and the event log.
    pub data_dir: PathBuf,
    /// sled page cache, in MiB (the event catalogue; records are read from the event log).
    pub cache_capacity_mb: u64,
    /// Seconds between sweeps that delete expired (NIP-40) events.
    pub expiration_sweep_secs: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { data_dir: PathBuf::from("./data"), cache_capacity_mb: 64, expiration_sweep_secs: 60 }
    }
}

/// `[limitation]`, named exactly as NIP-11's `limitation` fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limitation {
    /// Largest WebSocket frame, in bytes.
    pub max_message_length: usize,
    /// Open subscriptions per connection.
    pub max_subscriptions: usize,
    /// Filters per REQ / COUNT.
    pub max_filters: usize,
    /// Largest `limit` honoured; larger ones are clamped.
    pub max_limit: u64,
    /// `limit` applied when a filter has none.
    pub default_limit: u64,
    /// Longest subscription id, in characters.
    pub max_subid_length: usize,
    /// Most tags on one event.
    pub max_event_tags: usize,
    /// Longest content, in bytes.
    pub max_content_length: usize,
    /// Events older than this many seconds are refused; 0 = no limit.
    pub created_at_lower_limit: u64,
    /// Events more than this many seconds in the future are refused; 0 = no limit.
    pub created_at_upper_limit: u64,
}

impl Default for Limitation {
    fn default() -> Self {
        Limitation {
            max_message_length: 131_072,
            max_subscriptions: 20,
            max_filters: 10,
            max_limit: 500,
            default_limit: 100,
            max_subid_length: 64,
            max_event_tags: 2500,
            max_content_length: 65_536,
            created_at_lower_limit: 0,
            created_at_upper_limit: 900,
        }
    }
}

/// `[info]`: NIP-11 descriptive fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Info {
    /// Relay name.
    pub name: String,
    /// Relay description.
    pub description: String,
    /// Admin pubkey (hex), or empty.
    pub pubkey: String,
    /// Admin contact, or empty.
    pub contact: String,
    /// Icon URL, or empty.
    pub icon: String,
}

impl Default for Info {
    fn default() -> Self {
        Info {
            name: "hearth".into(),
            description: "A hearth relay for a small community.".into(),
            pubkey: String::new(),
            contact: String::new(),
            icon: String::new(),
        }
    }
}

/// Where each tier limit came from: `env` when a `HEARTH_LIMITS__<TIER>__<KEY>` variable set it,
/// `config` when the file set it to something other than the default, else `default`.
fn sources(path: Option<&Path>, env: &HashMap<String, String>) -> Result<BTreeMap<String, Source>, ConfigError> {
    use config::{File, FileFormat};
    let file = match path {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from("relay.toml")).filter(|p| p.exists()),
    };
    let from_file: Option<Config> = match file {
        Some(f) => Some(
            config::Config::builder()
                .add_source(File::from_str(EMBEDDED_RELAY_TOML, FileFormat::Toml))
                .add_source(File::from(f).format(FileFormat::Toml))
                .build()?
                .try_deserialize()?,
        ),
        None => None,
    };
    let defaults = LimitsConfig::default();
    let mut out = BTreeMap::new();
    for tier in ["human", "agent"] {
        for key in Config::TIER_KEYS {
            let dotted = format!("limits.{tier}.{key}");
            let env_name = format!("HEARTH_LIMITS__{}__{}", tier.to_uppercase(), key.to_uppercase());
            let source = if env.keys().any(|k| k.eq_ignore_ascii_case(&env_name)) {
                Source::Env
            } else if from_file.as_ref().is_some_and(|c| c.limits.tier(tier).get(key) != defaults.tier(tier).get(key)) {
                Source::Config
            } else {
                Source::Default
            };
            out.insert(dotted, source);
        }
    }
    Ok(out)
}

/// One tier's quotas (`[limits.human]`, `[limits.agent]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TierLimits {
    /// Sustained WebSocket EVENT/REQ/COUNT frames per second.
    pub ws_events_per_sec: u64,
    /// Burst of WebSocket frames = `ws_events_per_sec × ws_burst_window_secs`.
    pub ws_burst_window_secs: u64,
    /// Durable events per minute (burst of that many, refilling over a minute).
    pub messages_per_min: u64,
    /// REST calls per minute (burst of that many, refilling over a minute).
    pub api_calls_per_min: u64,
}

impl TierLimits {
    /// The value of `key` (one of [`Config::TIER_KEYS`]).
    pub fn get(&self, key: &str) -> Option<u64> {
        match key {
            "ws_events_per_sec" => Some(self.ws_events_per_sec),
            "ws_burst_window_secs" => Some(self.ws_burst_window_secs),
            "messages_per_min" => Some(self.messages_per_min),
            "api_calls_per_min" => Some(self.api_calls_per_min),
            _ => None,
        }
    }

    /// Sets `key`; false for an unknown key.
    pub fn set(&mut self, key: &str, value: u64) -> bool {
        match key {
            "ws_events_per_sec" => self.ws_events_per_sec = value,
            "ws_burst_window_secs" => self.ws_burst_window_secs = value,
            "messages_per_min" => self.messages_per_min = value,
            "api_calls_per_min" => self.api_calls_per_min = value,
            _ => return false,
        }
        true
    }
}

impl Default for TierLimits {
    fn default() -> Self {
        TierLimits { ws_events_per_sec: 10, ws_burst_window_secs: 5, messages_per_min: 120, api_calls_per_min: 60 }
    }
}

/// `[limits]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// When false no quota is billed or refused (local development, and the benchmark's
    /// limiter-off baseline); the handler bound (`unavailable`) still applies. Start-up only.
    pub enabled: bool,
    /// Quotas of ordinary users.
    pub human: TierLimits,
    /// Quotas of pubkeys in `agent_pubkeys`.
    pub agent: TierLimits,
    /// Pubkeys (hex or npub) billed at the agent tier.
    pub agent_pubkeys: Vec<String>,
    /// Most principals whose limiter state is kept (least recently used are forgotten).
    pub max_tracked_principals: u64,
    /// EVENT/REQ/COUNT frames handled at once across the relay.
    pub handler_permits: usize,
    /// How long a frame may wait for a handler permit before `relay busy (unavailable)`.
    pub handler_wait_ms: u64,
}

impl LimitsConfig {
    /// The tier named `tier` (`human` or `agent`).
    pub fn tier(&self, tier: &str) -> &TierLimits {
        if tier == "agent" { &self.agent } else { &self.human }
    }

    /// The tier named `tier`, mutably; `None` for an unknown tier.
    pub fn tier_mut(&mut self, tier: &str) -> Option<&mut TierLimits> {
        match tier {
            "human" => Some(&mut self.human),
            "agent" => Some(&mut self.agent),
            _ => None,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            enabled: true,
            human: TierLimits::default(),
            agent: TierLimits::default(),
            agent_pubkeys: Vec::new(),
            max_tracked_principals: 100_000,
            handler_permits: 256,
            handler_wait_ms: 500,
        }
    }
}

/// `[auth]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// REQ, COUNT and EVENT need NIP-42 authentication first.
    pub required: bool,
    /// When non-empty, only these pubkeys (hex or npub) may publish.
    pub members: Vec<String>,
    /// Peer addresses whose `X-Forwarded-For` / `Forwarded` header names the client.
    pub trusted_proxies: Vec<String>,
}

/// Parses a pubkey given as 64 lowercase hex characters or an `npub`.
pub fn parse_pubkey(text: &str) -> Option<PubKey> {
    let text = text.trim();
    if text.starts_with("npub1") {
        crate::protocol::nip19::decode("npub", text).map(PubKey)
    } else {
        PubKey::from_hex(text)
    }
}

/// Keys whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &["auth.members", "auth.trusted_proxies", "limits.agent_pubkeys", "admin.pubkeys"];

impl Config {
    /// Loads defaults → embedded relay.toml → `path` (or `./relay.toml` when present) → `env`.
    /// `env` is the process environment (passed in so tests can supply their own).
    pub fn load(path: Option<&Path>, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
        use config::{Environment, File, FileFormat};
        let mut builder = config::Config::builder().add_source(File::from_str(EMBEDDED_RELAY_TOML, FileFormat::Toml));
        match path {
            Some(path) => builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true)),
            None if Path::new("relay.toml").exists() => {
                builder = builder.add_source(File::from(Path::new("relay.toml")).format(FileFormat::Toml))
            }
            None => {}
        }
        // Only HEARTH_<SECTION>__<KEY> names are configuration; HEARTH_KEY and friends belong to
        // the CLI.
        let ours: HashMap<String, String> = env
            .iter()
            .filter(|(k, _)| k.starts_with("HEARTH_") && k.contains("__"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut environment = Environment::with_prefix("HEARTH")
            .prefix_separator("_")
            .separator("__")
            .list_separator(",")
            .ignore_empty(true)
            .try_parsing(true)
            .source(Some(ours.clone()));
        for key in LIST_KEYS {
            environment = environment.with_list_parse_key(key);
        }
        let mut config: Config = builder.add_source(environment).build()?.try_deserialize()?;
        config.validate()?;
        config.sources = sources(path, &ours)?;
        Ok(config)
    }

    /// Every tier key, as `(tier, key)`.
    pub const TIER_KEYS: [&'static str; 4] =
        ["ws_events_per_sec", "ws_burst_window_secs", "messages_per_min", "api_calls_per_min"];

    /// Checks every value, naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.bind_addr()?;
        let url = &self.server.public_url;
        if !(url.is_empty() || url.starts_with("ws://") || url.starts_with("wss://")) {
            return Err(invalid("server.public_url", "must start with ws:// or wss://"));
        }
        let positive: [(&str, u64); 12] = [
            ("server.max_outbound_queue", self.server.max_outbound_queue as u64),
            ("server.max_in_flight", self.server.max_in_flight as u64),
            ("storage.cache_capacity_mb", self.storage.cache_capacity_mb),
            ("storage.expiration_sweep_secs", self.storage.expiration_sweep_secs),
            ("limitation.max_message_length", self.limitation.max_message_length as u64),
            ("limitation.max_subscriptions", self.limitation.max_subscriptions as u64),
            ("limitation.max_filters", self.limitation.max_filters as u64),
            ("limitation.max_limit", self.limitation.max_limit),
            ("limitation.default_limit", self.limitation.default_limit),
            ("limitation.max_subid_length", self.limitation.max_subid_length as u64),
            ("limitation.max_event_tags", self.limitation.max_event_tags as u64),
            ("limitation.max_content_length", self.limitation.max_content_length as u64),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(invalid(key, "must be a positive number"));
        }
        for (tier, t) in [("human", &self.limits.human), ("agent", &self.limits.agent)] {
            for (key, v) in [
                ("ws_events_per_sec", t.ws_events_per_sec),
                ("ws_burst_window_secs", t.ws_burst_window_secs),
                ("messages_per_min", t.messages_per_min),
                ("api_calls_per_min", t.api_calls_per_min),
            ] {
                if v == 0 {
                    return Err(invalid(&format!("limits.{tier}.{key}"), "must be a positive number"));
                }
            }
        }
        for (key, v) in [
            ("limits.max_tracked_principals", self.limits.max_tracked_principals),
            ("limits.handler_permits", self.limits.handler_permits as u64),
            ("limits.handler_wait_ms", self.limits.handler_wait_ms),
        ] {
            if v == 0 {
                return Err(invalid(key, "must be a positive number"));
            }
        }
        for (key, list) in [("limits.agent_pubkeys", &self.limits.agent_pubkeys), ("auth.members", &self.auth.members)]
        {
            if let Some(bad) = list.iter().find(|p| parse_pubkey(p).is_none()) {
                return Err(invalid(key, format!("has {bad:?}, which is not a hex pubkey or npub")));
            }
        }
        if !self.admin.bind.is_empty() && self.admin.bind.parse::<SocketAddr>().is_err() {
            return Err(invalid("admin.bind", "is not an address like 127.0.0.1:7778"));
        }
        if let Some(bad) = self.admin.pubkeys.iter().find(|p| parse_pubkey(p).is_none()) {
            return Err(invalid("admin.pubkeys", format!("has {bad:?}, which is not a hex pubkey or npub")));
        }
        if let Some(bad) = self.auth.trusted_proxies.iter().find(|p| p.trim().parse::<std::net::IpAddr>().is_err()) {
            return Err(invalid("auth.trusted_proxies", format!("has {bad:?}, which is not an IP address")));
        }
        if self.limitation.default_limit > self.limitation.max_limit {
            return Err(invalid("limitation.default_limit", "must not exceed limitation.max_limit"));
        }
        if !self.info.pubkey.is_empty() && PubKey::from_hex(&self.info.pubkey).is_none() {
            return Err(invalid("info.pubkey", "must be 64 lowercase hex characters"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn embedded_relay_toml_equals_built_in_defaults() {
        let from_file: Config = config::Config::builder()
            .add_source(config::File::from_str(EMBEDDED_RELAY_TOML, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize()
            .unwrap();
        assert_eq!(from_file, Config::default());
    }

    #[test]
    fn env_overrides_file() {
        let c = Config::load(
            None,
            &env(&[
                ("HEARTH_SERVER__BIND", "127.0.0.1:0"),
                ("HEARTH_LIMITATION__MAX_LIMIT", "7"),
                ("HEARTH_LIMITATION__DEFAULT_LIMIT", "7"),
                ("HEARTH_KEY", "not config"),
            ]),
        )
        .unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:0");
        assert_eq!(c.limitation.max_limit, 7);
    }

    #[test]
    fn list_keys_accept_comma_separated_env_values() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let c = Config::load(
            None,
            &env(&[
                ("HEARTH_LIMITS__AGENT_PUBKEYS", &format!("{a},{b}")),
                ("HEARTH_AUTH__TRUSTED_PROXIES", "127.0.0.1"),
                ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "20"),
            ]),
        )
        .unwrap();
        assert_eq!(c.limits.agent_pubkeys, vec![a, b]);
        assert_eq!(c.auth.trusted_proxies, vec!["127.0.0.1".to_string()]);
        assert_eq!(c.limits.human.ws_events_per_sec, 20);
        assert_eq!(c.limits.agent.ws_events_per_sec, 10);
    }

    #[test]
    fn sources_name_env_and_default() {
        let c = Config::load(None, &env(&[("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "7")])).unwrap();
        assert_eq!(c.sources["limits.agent.messages_per_min"], Source::Env);
        assert_eq!(c.sources["limits.human.messages_per_min"], Source::Default);
        let dir = std::env::temp_dir().join(format!("hearth-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.toml");
        std::fs::write(&file, "[limits.human]\nws_events_per_sec = 3\nmessages_per_min = 120\n").unwrap();
        let c = Config::load(Some(&file), &env(&[])).unwrap();
        assert_eq!(c.sources["limits.human.ws_events_per_sec"], Source::Config);
        // Set in the file, but to the default value.
        assert_eq!(c.sources["limits.human.messages_per_min"], Source::Default);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "0", "limitation.max_subscriptions"),
            ("HEARTH_SERVER__BIND", "nowhere", "server.bind"),
            ("HEARTH_SERVER__BINDD", "x", "bindd"),
            ("HEARTH_LIMITATION__MAX_LIMIT", "-3", "max_limit"),
            ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "0", "limits.human.ws_events_per_sec"),
            ("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "-1", "messages_per_min"),
            ("HEARTH_LIMITS__HANDLER_PERMITS", "0", "limits.handler_permits"),
            ("HEARTH_AUTH__MEMBERS", "nope", "auth.members"),
            ("HEARTH_AUTH__TRUSTED_PROXIES", "x.y", "auth.trusted_proxies"),
        ];
        for (k, v, named) in cases {
            let err = Config::load(None, &env(&[(k, v)])).unwrap_err().to_string();
            assert!(err.contains(named), "{k}={v}: {err}");
        }
    }
}
