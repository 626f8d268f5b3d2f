//! `[node]` and the `[limits]` keys of a cluster: several nodes behind one address sharing one
//! set of quotas through Redis (or Valkey).
//!
//! Owns [`NodeConfig`], [`StorageBackend`], [`LimiterBackend`], [`RedisUnavailable`], the host name `node.name`
//! defaults to, and the check of `limits.redis_url`.

use serde::{Deserialize, Serialize};

/// `[node]`: this process among the nodes of one relay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// The name audit entries and the admin page give this node; empty: the host name.
    pub name: String,
}

/// `storage.backend`: where the events live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    /// The embedded store in `storage.data_dir`: one node's.
    #[default]
    Sled,
    /// The PostgreSQL database at `storage.postgres_url`, which several nodes may share.
    Postgres,
}

/// `limits.backend`: where the quota buckets live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimiterBackend {
    /// In this process: one node's quotas.
    #[default]
    Memory,
    /// In the Redis at `limits.redis_url`, shared by every node that names it.
    Redis,
}

/// `limits.redis_unavailable`: what an admission does while Redis cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisUnavailable {
    /// Billed by this node's own memory limiter (each node then allows a whole quota).
    #[default]
    Local,
    /// Refused: `OK false "error: …"`, `CLOSED "error: …"`, HTTP 503.
    Refuse,
}

impl RedisUnavailable {
    /// The name, as in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            RedisUnavailable::Local => "local",
            RedisUnavailable::Refuse => "refuse",
        }
    }
}

/// The machine's host name (Linux: the kernel's), else `HOSTNAME`, else `hearth`.
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "hearth".to_string())
}

/// What is wrong with `limits.redis_url` for the Redis backend, if anything.
pub fn redis_url_problem(url: &str) -> Option<String> {
    if url.is_empty() {
        return Some("must be set when limits.backend = \"redis\" (e.g. redis://127.0.0.1:6379/0)".into());
    }
    if url.starts_with("rediss://") {
        return Some("rediss:// (TLS) is not built in; reach Redis on a private network or a unix socket".into());
    }
    match redis::Client::open(url) {
        Ok(_) => None,
        Err(e) => Some(format!("is not a Redis URL: {e}")),
    }
}
