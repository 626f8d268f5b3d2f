//! The configuration's sections, as serde reads them: every section refuses unknown keys, and
//! every value is typed (pubkeys, addresses, IPs) as it is read.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::de;
use super::quota::{LimitKey, Source, Tier, TierLimits};
use crate::protocol::{Kind, PrivateKinds, PubKey};

/// The repository's `relay.toml`, the documented defaults.
pub const EMBEDDED_RELAY_TOML: &str = include_str!("../../relay.toml");

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
    /// `[access]`: who may write and read (NIP-43 membership).
    pub access: super::access::AccessConfig,
    /// `[relay]`: the relay's own identity.
    pub relay: RelayConfig,
    /// `[sync]`: NIP-77 negentropy sessions and the peers kept in step.
    pub sync: super::sync::SyncConfig,
    /// `[node]`: this process among the nodes of one relay.
    pub node: super::cluster::NodeConfig,
    /// `[groups]`: NIP-29 relay-based groups.
    pub groups: super::groups::GroupsConfig,
    /// `[media]`: the Blossom server.
    pub media: super::media::MediaConfig,
    /// `[moderation]`: the automatic hold of reported events.
    pub moderation: super::reviews::ModerationConfig,
    /// Where each tier quota came from; absent = default.
    #[serde(skip)]
    pub sources: BTreeMap<LimitKey, Source>,
}

/// `[relay]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    /// The relay's own secret key (hex or nsec), which signs its NIP-43 events and is NIP-11's
    /// `self`; empty: one generated at the first start and kept in the data directory.
    pub secret_key: String,
}

/// `[admin]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// A separate address for the admin API (e.g. `127.0.0.1:7778`); `""` (none) = the relay's
    /// port.
    #[serde(with = "de::optional_addr")]
    pub bind: Option<SocketAddr>,
    /// Bearer token for the admin API; empty = no token access.
    pub token: String,
    /// Pubkeys (hex or npub) allowed to use the admin API and NIP-86 with NIP-98 auth.
    #[serde(with = "de::pubkeys")]
    pub pubkeys: Vec<PubKey>,
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
    #[serde(with = "de::addr")]
    pub bind: SocketAddr,
    /// The relay's public `ws(s)://` URL; empty = unknown.
    pub public_url: String,
    /// Live frames queued per connection at most.
    pub max_outbound_queue: usize,
    /// Bytes of live frames queued per connection at most; past it the client is cut off.
    pub max_outbound_bytes: usize,
    /// A client whose socket takes no bytes for this long is cut off as a slow consumer.
    pub slow_consumer_ms: u64,
    /// Frames handled concurrently per connection (EVENTs awaiting their OK, queries running).
    pub max_in_flight: usize,
    /// Seconds a client may take to send a request head (also between keep-alive requests).
    pub header_timeout_secs: u64,
    /// Seconds a whole HTTP request may take to arrive and be answered (not a WebSocket).
    pub body_timeout_secs: u64,
    /// Seconds between WebSocket pings; a peer that sends no pong within another interval is
    /// closed and its subscriptions freed.
    pub ping_interval_secs: u64,
    /// Open connections at most; past it a connection is answered 503 with `Retry-After`.
    pub max_connections: usize,
    /// Open connections from one peer address at most (trusted proxies count only in the total).
    pub max_connections_per_ip: usize,
    /// Open subscriptions from one client address (its IP ceiling's network) at most.
    pub max_subscriptions_per_ip: usize,
    /// Open subscriptions on the whole relay at most.
    pub max_subscriptions_total: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 7777)),
            public_url: String::new(),
            max_outbound_queue: 16_384,
            max_outbound_bytes: 8 * 1024 * 1024,
            slow_consumer_ms: 10_000,
            max_in_flight: 256,
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            ping_interval_secs: 30,
            max_connections: 10_000,
            max_connections_per_ip: 256,
            max_subscriptions_per_ip: 2_000,
            max_subscriptions_total: 200_000,
        }
    }
}

/// `[storage]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Directory of the store (the sled database and the event log) and of the node's own files.
    pub data_dir: PathBuf,
    /// Where the events live: `sled` (embedded) or `postgres` (`postgres_url`). Start-up only.
    pub backend: super::cluster::StorageBackend,
    /// The PostgreSQL database, `postgres://user:password@host:port/database`.
    pub postgres_url: String,
    /// PostgreSQL connections this node holds at most.
    pub postgres_pool: u64,
    /// sled page cache, in MiB (the event catalogue; records are read from the event log).
    pub cache_capacity_mb: u64,
    /// Seconds between sweeps that delete expired (NIP-40) events.
    pub expiration_sweep_secs: u64,
    /// Share of `events.log` that is dead (replaced, deleted, expired) at which the relay compacts
    /// it in the background; 0 turns automatic compaction off.
    pub compact_dead_ratio: f64,
    /// Logs shorter than this (MiB) are not compacted automatically.
    pub compact_min_mb: u64,
    /// MiB per second a compaction's background copy writes at most; 0: no limit.
    pub compact_max_mb_per_sec: u64,
    /// Events the in-memory part of the index holds before they are written out as a segment.
    pub index_memory_events: u64,
    /// NIP-50: keep a full-text search index in `data_dir/search` and answer `search` filters.
    pub search: bool,
    /// The kinds the search index holds.
    pub search_kinds: Vec<Kind>,
    /// The search index writer's memory, MiB (at least 15: tantivy's floor).
    pub search_memory_mb: u64,
}

impl StorageConfig {
    /// How the store is opened.
    pub fn tuning(&self) -> crate::store::Tuning {
        crate::store::Tuning {
            cache_capacity_mb: self.cache_capacity_mb,
            index_memory_events: usize::try_from(self.index_memory_events).unwrap_or(usize::MAX),
            postgres: (self.backend == super::cluster::StorageBackend::Postgres).then(|| crate::store::PgTuning {
                url: self.postgres_url.clone(),
                pool: usize::try_from(self.postgres_pool).unwrap_or(usize::MAX),
            }),
            search: self.search.then(|| crate::store::SearchTuning {
                kinds: self.search_kinds.clone(),
                memory_mb: self.search_memory_mb,
            }),
        }
    }

    /// When the store compacts on its own, and how fast.
    pub fn compact_policy(&self) -> crate::store::CompactPolicy {
        const MIB: u64 = 1024 * 1024;
        crate::store::CompactPolicy {
            dead_ratio: self.compact_dead_ratio,
            min_bytes: self.compact_min_mb.saturating_mul(MIB),
            max_bytes_per_sec: self.compact_max_mb_per_sec.saturating_mul(MIB),
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            data_dir: PathBuf::from("./data"),
            backend: super::cluster::StorageBackend::Sled,
            postgres_url: String::new(),
            postgres_pool: 16,
            cache_capacity_mb: 32,
            expiration_sweep_secs: 60,
            compact_dead_ratio: 0.5,
            compact_min_mb: 64,
            compact_max_mb_per_sec: 0,
            index_memory_events: crate::store::INDEX_MEMORY_EVENTS as u64,
            search: true,
            // Notes, long-form articles and their drafts, profiles, highlights.
            search_kinds: [1, 30023, 30024, 0, 9802].into_iter().map(Kind).collect(),
            search_memory_mb: 64,
        }
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
            max_subscriptions: 200,
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
    /// Admin pubkey (hex); `""` = none.
    #[serde(with = "de::optional_pubkey")]
    pub pubkey: Option<PubKey>,
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
            pubkey: None,
            contact: String::new(),
            icon: String::new(),
        }
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
    /// The IP ceiling: quotas of one client address (an IPv6 network) under all its keys,
    /// billed beside every frame's own principal.
    #[serde(default = "TierLimits::ip_default")]
    pub ip: TierLimits,
    /// Networks (CIDRs) whose addresses skip the IP ceiling: a NAT full of agents, a bridge.
    pub ip_ceiling_exempt: Vec<IpNet>,
    /// IPv6 clients share the ceiling of their network of this prefix length.
    pub ipv6_prefix_len: u8,
    /// Pubkeys (hex or npub) billed at the agent tier.
    #[serde(with = "de::pubkeys")]
    pub agent_pubkeys: Vec<PubKey>,
    /// Most principals whose limiter state is kept (least recently used are forgotten).
    pub max_tracked_principals: u64,
    /// EVENT/REQ/COUNT frames handled at once across the relay.
    pub handler_permits: usize,
    /// Handler permits one principal, or one IP ceiling, may hold at once.
    pub handler_permits_per_principal: usize,
    /// How long a frame may wait for a handler permit before `relay busy (unavailable)`.
    pub handler_wait_ms: u64,
    /// The longest NIP-50 `search` text, in characters; a longer one is `CLOSED "invalid: …"`.
    pub max_search_chars: usize,
    /// Where the quota buckets live: this process, or a Redis several nodes share. Start-up only.
    pub backend: super::cluster::LimiterBackend,
    /// The shared Redis (`redis://host:port/db`, `unix:///path`), for `backend = "redis"`.
    pub redis_url: String,
    /// How long one call to Redis may take before it counts as unavailable.
    pub redis_timeout_ms: u64,
    /// What admissions do while Redis is unavailable.
    pub redis_unavailable: super::cluster::RedisUnavailable,
    /// Prefix of every key hearth keeps in Redis (two relays can share one Redis).
    pub redis_prefix: String,
}

impl LimitsConfig {
    /// The quotas of `tier`.
    pub fn tier(&self, tier: Tier) -> &TierLimits {
        match tier {
            Tier::Human => &self.human,
            Tier::Agent => &self.agent,
            Tier::Ip => &self.ip,
        }
    }

    /// The quotas of `tier`, mutably.
    pub fn tier_mut(&mut self, tier: Tier) -> &mut TierLimits {
        match tier {
            Tier::Human => &mut self.human,
            Tier::Agent => &mut self.agent,
            Tier::Ip => &mut self.ip,
        }
    }

    /// The value of one quota.
    pub fn get(&self, key: LimitKey) -> u64 {
        self.tier(key.tier).get(key.key)
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            enabled: true,
            human: TierLimits::default(),
            agent: TierLimits::default(),
            ip: TierLimits::ip_default(),
            ip_ceiling_exempt: Vec::new(),
            ipv6_prefix_len: 64,
            agent_pubkeys: Vec::new(),
            max_tracked_principals: 100_000,
            handler_permits: 256,
            handler_permits_per_principal: 8,
            handler_wait_ms: 500,
            max_search_chars: 256,
            backend: super::cluster::LimiterBackend::Memory,
            redis_url: String::new(),
            redis_timeout_ms: 50,
            redis_unavailable: super::cluster::RedisUnavailable::Local,
            redis_prefix: "hearth:".into(),
        }
    }
}

/// `[auth]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// REQ, COUNT and EVENT need NIP-42 authentication first.
    pub required: bool,
    /// When non-empty, only these pubkeys (hex or npub) may publish.
    #[serde(with = "de::pubkeys")]
    pub members: Vec<PubKey>,
    /// Peer addresses whose `X-Forwarded-For` / `Forwarded` header names the client.
    #[serde(with = "de::ips")]
    pub trusted_proxies: Vec<IpAddr>,
    /// Kinds served only to a connection authenticated as the event's author or as a pubkey in
    /// one of its `p` tags (NIP-42 read restrictions): NIP-04 direct messages and NIP-59 gift
    /// wraps by default.
    pub private_kinds: Vec<Kind>,
}

impl AuthConfig {
    /// [`AuthConfig::private_kinds`] as the read paths ask them.
    pub fn private(&self) -> PrivateKinds {
        PrivateKinds::new(&self.private_kinds)
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            required: false,
            members: Vec::new(),
            trusted_proxies: Vec::new(),
            private_kinds: vec![Kind(4), Kind(1059), Kind(21059)],
        }
    }
}
