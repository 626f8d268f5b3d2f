//! Loading the configuration: the layers, where each tier quota came from, and `validate()`.
//!
//! Owns the one load path: built-in defaults → embedded `relay.toml` → the file → the
//! `HEARTH_<SECTION>__<KEY>` environment. The file layers are built once and read twice: merged
//! with the environment into the [`Config`], and alone to tell a file value from a default.

use std::collections::HashMap;
use std::path::Path;

use config::{Environment, File, FileFormat};

use super::quota::{LimitKey, Source};
use super::sections::{Config, EMBEDDED_RELAY_TOML, LimitsConfig};

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

/// Keys whose environment value is a comma-separated list.
const LIST_KEYS: &[&str] = &[
    "auth.members",
    "auth.trusted_proxies",
    "auth.private_kinds",
    "limits.agent_pubkeys",
    "limits.ip_ceiling_exempt",
    "admin.pubkeys",
    "media.allowed_types",
];

/// The environment variable that sets `key`.
fn env_name(key: LimitKey) -> String {
    format!("HEARTH_LIMITS__{}__{}", key.tier.as_str(), key.key.as_str()).to_uppercase()
}

/// `HEARTH_` variables that name a section but are not read: one underscore where two belong
/// (`HEARTH_LIMITS_HUMAN_…`). Sorted.
fn misspelled(env: &HashMap<String, String>) -> Vec<&str> {
    // The sections, as the configuration's own fields name them (`LIMITS`).
    let sections: Vec<String> = match serde_json::to_value(Config::default()) {
        Ok(serde_json::Value::Object(fields)) => fields.keys().map(|k| k.to_ascii_uppercase()).collect(),
        _ => Vec::new(),
    };
    let mut out: Vec<&str> = env
        .keys()
        .filter_map(|name| {
            let rest = name.strip_prefix("HEARTH_")?.to_ascii_uppercase();
            let named = sections.iter().any(|s| rest.len() > s.len() && rest.starts_with(s.as_str()));
            (named && !rest.contains("__")).then_some(name.as_str())
        })
        .collect();
    out.sort_unstable();
    out
}

/// The embedded `relay.toml`, then `path` (or `./relay.toml` when present).
fn file_layers(path: Option<&Path>) -> Result<config::Config, ConfigError> {
    let mut builder = config::Config::builder().add_source(File::from_str(EMBEDDED_RELAY_TOML, FileFormat::Toml));
    match path {
        Some(path) => builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true)),
        None if Path::new("relay.toml").exists() => {
            builder = builder.add_source(File::from(Path::new("relay.toml")).format(FileFormat::Toml))
        }
        None => {}
    }
    Ok(builder.build()?)
}

impl Config {
    /// Loads defaults → embedded relay.toml → `path` (or `./relay.toml` when present) → `env`.
    /// `env` is the process environment (passed in so tests can supply their own).
    pub fn load(path: Option<&Path>, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
        let files = file_layers(path)?;
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
        for name in misspelled(env) {
            tracing::warn!(
                "{name} is not read: a configuration variable is HEARTH_<SECTION>__<KEY>, with two underscores \
                 between the section and each key (e.g. HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC)"
            );
        }
        let merged = config::Config::builder().add_source(files.clone()).add_source(environment).build()?;
        let mut config: Config = merged.try_deserialize()?;
        config.validate()?;
        if config.node.name.is_empty() {
            config.node.name = super::cluster::host_name();
        }
        // Where each tier quota came from: `env` when a variable set it, `config` when the file
        // set it to something other than the default, else `default`.
        let from_files: LimitsConfig = files.try_deserialize::<Config>()?.limits;
        let defaults = LimitsConfig::default();
        config.sources = LimitKey::all()
            .map(|key| {
                let name = env_name(key);
                let source = if ours.keys().any(|k| k.eq_ignore_ascii_case(&name)) {
                    Source::Env
                } else if from_files.get(key) != defaults.get(key) {
                    Source::Config
                } else {
                    Source::Default
                };
                (key, source)
            })
            .collect();
        Ok(config)
    }

    /// Checks every value the types do not already guarantee, naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let secret = self.relay.secret_key.trim();
        if !secret.is_empty() && crate::protocol::Keys::parse(secret).is_err() {
            return Err(invalid(
                "relay.secret_key",
                "is not a secret key: give 64 hex characters or an nsec, or leave it empty to have one generated \
                 and kept in the data directory (relay.key)",
            ));
        }
        let url = &self.server.public_url;
        if !(url.is_empty() || url.starts_with("ws://") || url.starts_with("wss://")) {
            return Err(invalid("server.public_url", "must start with ws:// or wss://"));
        }
        let positive: [(&str, u64); 28] = [
            ("limits.redis_timeout_ms", self.limits.redis_timeout_ms),
            ("server.max_outbound_queue", self.server.max_outbound_queue as u64),
            ("server.max_outbound_bytes", self.server.max_outbound_bytes as u64),
            ("server.slow_consumer_ms", self.server.slow_consumer_ms),
            ("server.max_in_flight", self.server.max_in_flight as u64),
            ("server.header_timeout_secs", self.server.header_timeout_secs),
            ("server.body_timeout_secs", self.server.body_timeout_secs),
            ("server.ping_interval_secs", self.server.ping_interval_secs),
            ("server.max_connections", self.server.max_connections as u64),
            ("server.max_connections_per_ip", self.server.max_connections_per_ip as u64),
            ("server.max_subscriptions_per_ip", self.server.max_subscriptions_per_ip as u64),
            ("server.max_subscriptions_total", self.server.max_subscriptions_total as u64),
            ("storage.cache_capacity_mb", self.storage.cache_capacity_mb),
            ("storage.expiration_sweep_secs", self.storage.expiration_sweep_secs),
            ("storage.index_memory_events", self.storage.index_memory_events),
            ("limitation.max_message_length", self.limitation.max_message_length as u64),
            ("limitation.max_subscriptions", self.limitation.max_subscriptions as u64),
            ("limitation.max_filters", self.limitation.max_filters as u64),
            ("limitation.max_limit", self.limitation.max_limit),
            ("limitation.default_limit", self.limitation.default_limit),
            ("limitation.max_subid_length", self.limitation.max_subid_length as u64),
            ("limitation.max_event_tags", self.limitation.max_event_tags as u64),
            ("limitation.max_content_length", self.limitation.max_content_length as u64),
            ("limits.max_tracked_principals", self.limits.max_tracked_principals),
            ("limits.handler_permits", self.limits.handler_permits as u64),
            ("limits.handler_permits_per_principal", self.limits.handler_permits_per_principal as u64),
            ("limits.handler_wait_ms", self.limits.handler_wait_ms),
            ("limits.max_search_chars", self.limits.max_search_chars as u64),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(invalid(key, "must be a positive number"));
        }
        if let Some(key) = LimitKey::all().find(|k| self.limits.get(*k) == 0) {
            return Err(invalid(&format!("limits.{key}"), "must be a positive number"));
        }
        if let Some(key) = LimitKey::all().find(|k| self.limits.get(*k) > k.key.max()) {
            return Err(invalid(&format!("limits.{key}"), format!("must be at most {}", key.key.max())));
        }
        if !(0.0..=1.0).contains(&self.storage.compact_dead_ratio) {
            return Err(invalid("storage.compact_dead_ratio", "must be between 0 (off) and 1"));
        }
        if self.limits.ipv6_prefix_len > 128 {
            return Err(invalid("limits.ipv6_prefix_len", "must be at most 128"));
        }
        if self.storage.search_memory_mb < 15 {
            return Err(invalid("storage.search_memory_mb", "must be at least 15 (the search index's floor)"));
        }
        if self.limits.backend == super::cluster::LimiterBackend::Redis
            && let Some(problem) = super::cluster::redis_url_problem(&self.limits.redis_url)
        {
            return Err(invalid("limits.redis_url", problem));
        }
        if self.storage.backend == super::cluster::StorageBackend::Postgres
            && !(self.storage.postgres_url.starts_with("postgres://")
                || self.storage.postgres_url.starts_with("postgresql://"))
        {
            let problem = "storage.backend is \"postgres\": set it to postgres://user:password@host:port/database";
            return Err(invalid("storage.postgres_url", problem));
        }
        if let Some((key, problem)) = self.media.s3_problem() {
            return Err(invalid(key, problem));
        }
        if self.storage.postgres_pool == 0 {
            return Err(invalid("storage.postgres_pool", "must be a positive number"));
        }
        if self.limitation.default_limit > self.limitation.max_limit {
            return Err(invalid("limitation.default_limit", "must not exceed limitation.max_limit"));
        }
        self.validate_sync()
    }

    /// `[sync]`: the bounds, and every peer's URL, filter and interval.
    fn validate_sync(&self) -> Result<(), ConfigError> {
        let sync = &self.sync;
        for (key, value) in [
            ("sync.max_items", sync.max_items as u64),
            ("sync.max_sessions", sync.max_sessions as u64),
            ("sync.idle_secs", sync.idle_secs),
            ("sync.max_items_held", sync.max_items_held as u64),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be a positive number"));
            }
        }
        if sync.max_items_held < sync.max_items {
            return Err(invalid("sync.max_items_held", "must be at least sync.max_items"));
        }
        if sync.frame_size_limit != 0 && sync.frame_size_limit < 4096 {
            return Err(invalid("sync.frame_size_limit", "must be 0 (no limit) or at least 4096"));
        }
        for (i, peer) in sync.peers.iter().enumerate() {
            if let Some(problem) = super::sync::peer_url_problem(&peer.url) {
                return Err(invalid(&format!("sync.peers[{i}].url"), problem));
            }
            match serde_json::from_str::<crate::protocol::Filter>(&peer.filter) {
                Err(e) => return Err(invalid(&format!("sync.peers[{i}].filter"), format!("is not a filter: {e}"))),
                Ok(f) if let Some(refusal) = f.search_refusal() => {
                    return Err(invalid(&format!("sync.peers[{i}].filter"), refusal));
                }
                Ok(_) => {}
            }
            if peer.interval_secs == 0 {
                return Err(invalid(&format!("sync.peers[{i}].interval_secs"), "must be a positive number"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
