//! Configuration: built-in defaults → `relay.toml` → `HEARTH_<SECTION>__<KEY>` environment.
//!
//! Owns the config structs (every section refuses unknown keys), the layering, and `validate()`,
//! which names the offending key. The repository's `relay.toml` is embedded in the binary as the
//! base layer, so the binary runs the same with or without the file beside it.

use std::collections::HashMap;
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
    /// Directory of the sled database.
    pub data_dir: PathBuf,
    /// sled page cache, in MiB.
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
            .source(Some(ours));
        for key in LIST_KEYS {
            environment = environment.with_list_parse_key(key);
        }
        let config: Config = builder.add_source(environment).build()?.try_deserialize()?;
        config.validate()?;
        Ok(config)
    }

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
    fn bad_values_name_their_key() {
        let cases = [
            ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "0", "limitation.max_subscriptions"),
            ("HEARTH_SERVER__BIND", "nowhere", "server.bind"),
            ("HEARTH_SERVER__BINDD", "x", "bindd"),
            ("HEARTH_LIMITATION__MAX_LIMIT", "-3", "max_limit"),
        ];
        for (k, v, named) in cases {
            let err = Config::load(None, &env(&[(k, v)])).unwrap_err().to_string();
            assert!(err.contains(named), "{k}={v}: {err}");
        }
    }
}
