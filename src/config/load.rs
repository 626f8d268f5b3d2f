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
mod tests {
    use super::super::Source;
    use super::*;
    use crate::config::{QuotaKey, Tier};

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn key(tier: Tier, key: QuotaKey) -> LimitKey {
        LimitKey { tier, key }
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
    fn sync_peers_are_read_from_the_file_and_a_bad_one_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("relay.toml");
        let load = |peer: &str| {
            std::fs::write(&file, format!("[[sync.peers]]\n{peer}\n")).unwrap();
            Config::load(Some(&file), &env(&[]))
        };
        let c = load("url = \"wss://relay.example\"\ndirection = \"both\"").unwrap();
        let peer = &c.sync.peers[0];
        assert_eq!((peer.url.as_str(), peer.filter.as_str(), peer.interval_secs), ("wss://relay.example", "{}", 300));
        assert_eq!(peer.direction, super::super::Direction::Both);
        for (peer, want) in [
            ("url = \"https://relay.example\"", "`sync.peers[0].url` must start with ws:// or wss://"),
            ("url = \"ws://\"", "`sync.peers[0].url` is not a URL: empty host"),
            ("url = \"ws://a\"\nfilter = \"[]\"", "`sync.peers[0].filter` is not a filter"),
            ("url = \"ws://a\"\ninterval_secs = 0", "`sync.peers[0].interval_secs` must be a positive number"),
        ] {
            let e = load(peer).unwrap_err().to_string();
            assert!(e.contains(want), "{peer}: {e}");
        }
    }

    #[test]
    fn env_overrides_file() {
        let c = Config::load(
            None,
            &env(&[
                ("HEARTH_SERVER__BIND", "127.0.0.1:0"),
                ("HEARTH_LIMITATION__MAX_LIMIT", "7"),
                ("HEARTH_LIMITATION__DEFAULT_LIMIT", "7"),
                ("HEARTH_ADMIN__BIND", "127.0.0.1:7778"),
                ("HEARTH_KEY", "not config"),
            ]),
        )
        .unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.admin.bind, Some("127.0.0.1:7778".parse().unwrap()));
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
        let parsed: Vec<String> = c.limits.agent_pubkeys.iter().map(|p| p.to_hex()).collect();
        assert_eq!(parsed, vec![a, b]);
        assert_eq!(c.auth.trusted_proxies, vec![std::net::IpAddr::from([127, 0, 0, 1])]);
        assert_eq!(c.limits.human.ws_events_per_sec, 20);
        assert_eq!(c.limits.agent.ws_events_per_sec, 10);
    }

    #[test]
    fn private_kinds_default_to_direct_messages_and_gift_wraps_and_take_an_env_list() {
        let kinds = |c: Config| c.auth.private_kinds.iter().map(|k| k.0).collect::<Vec<u16>>();
        assert_eq!(kinds(Config::load(None, &env(&[])).unwrap()), vec![4, 1059, 21059]);
        assert_eq!(kinds(Config::default()), vec![4, 1059, 21059]);
        let c = Config::load(None, &env(&[("HEARTH_AUTH__PRIVATE_KINDS", "4,1059,14")])).unwrap();
        assert_eq!(kinds(c), vec![4, 1059, 14]);
        assert!(Config::load(None, &env(&[("HEARTH_AUTH__PRIVATE_KINDS", "4,dm")])).is_err());
    }

    #[test]
    fn npub_is_accepted_where_a_pubkey_is() {
        let npub = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg";
        let c = Config::load(None, &env(&[("HEARTH_AUTH__MEMBERS", npub)])).unwrap();
        assert_eq!(c.auth.members[0].to_hex(), "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e");
    }

    #[test]
    fn sources_name_env_and_default() {
        let c = Config::load(None, &env(&[("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "7")])).unwrap();
        assert_eq!(c.sources[&key(Tier::Agent, QuotaKey::MessagesPerMin)], Source::Env);
        assert_eq!(c.sources[&key(Tier::Human, QuotaKey::MessagesPerMin)], Source::Default);
        let c = Config::load(None, &env(&[("HEARTH_LIMITS__HUMAN__WS_REQS_PER_SEC", "25")])).unwrap();
        assert_eq!((c.limits.human.ws_reqs_per_sec, c.limits.human.ws_reqs_burst_window_secs), (25, 10));
        assert_eq!(c.sources[&key(Tier::Human, QuotaKey::WsReqsPerSec)], Source::Env);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.toml");
        std::fs::write(&file, "[limits.human]\nws_events_per_sec = 3\nmessages_per_min = 120\n").unwrap();
        let c = Config::load(Some(&file), &env(&[])).unwrap();
        assert_eq!(c.sources[&key(Tier::Human, QuotaKey::WsEventsPerSec)], Source::Config);
        // Set in the file, but to the default value.
        assert_eq!(c.sources[&key(Tier::Human, QuotaKey::MessagesPerMin)], Source::Default);
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "0", "limitation.max_subscriptions"),
            ("HEARTH_SERVER__BIND", "nowhere", "server.bind"),
            ("HEARTH_SERVER__BINDD", "x", "bindd"),
            ("HEARTH_LIMITATION__MAX_LIMIT", "-3", "max_limit"),
            ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "0", "limits.human.ws_events_per_sec"),
            ("HEARTH_LIMITS__IP__WS_REQS_PER_SEC", "0", "limits.ip.ws_reqs_per_sec"),
            (
                "HEARTH_LIMITS__AGENT__WS_REQS_BURST_WINDOW_SECS",
                "3601",
                "`limits.agent.ws_reqs_burst_window_secs` must be at most 3600",
            ),
            ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_PER_IP", "0", "server.max_subscriptions_per_ip"),
            ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_TOTAL", "0", "server.max_subscriptions_total"),
            ("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "-1", "messages_per_min"),
            ("HEARTH_LIMITS__HANDLER_PERMITS", "0", "limits.handler_permits"),
            ("HEARTH_AUTH__MEMBERS", "nope", "auth.members"),
            ("HEARTH_AUTH__TRUSTED_PROXIES", "x.y", "auth.trusted_proxies"),
            ("HEARTH_ADMIN__BIND", "nowhere", "admin.bind"),
            ("HEARTH_INFO__PUBKEY", "ab", "info.pubkey"),
            (
                "HEARTH_LIMITS__IP__WS_EVENTS_PER_SEC",
                "18446744073709551615",
                "`limits.ip.ws_events_per_sec` must be at most 10000000",
            ),
            (
                "HEARTH_LIMITS__HUMAN__WS_BURST_WINDOW_SECS",
                "3601",
                "`limits.human.ws_burst_window_secs` must be at most 3600",
            ),
            ("HEARTH_STORAGE__COMPACT_DEAD_RATIO", "1.5", "storage.compact_dead_ratio"),
            (
                "HEARTH_STORAGE__BACKEND",
                "postgres",
                "`storage.postgres_url` storage.backend is \"postgres\": set it to postgres://",
            ),
            ("HEARTH_STORAGE__BACKEND", "mysql", "storage.backend"),
        ];
        for (k, v, named) in cases {
            let err = Config::load(None, &env(&[(k, v)])).unwrap_err().to_string();
            assert!(err.contains(named), "{k}={v}: {err}");
        }
    }
}
