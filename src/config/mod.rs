//! Configuration: built-in defaults → `relay.toml` → `HEARTH_<SECTION>__<KEY>` environment,
//! parsed once into types.
//!
//! Owns the config structs (`sections.rs`: every section refuses unknown keys); the layering,
//! the sources and `validate()` are in `load.rs`, the quota names in [`quota`]. Pubkeys, addresses and IPs are
//! typed from the moment they are loaded: nothing downstream re-parses a configuration string.
//! The repository's `relay.toml` is embedded in the binary as the base layer, so the binary runs
//! the same with or without the file beside it.
//!
//! Two words that must not be confused: **limitation** (`[limitation]`) is what NIP-11's
//! `limitation` object advertises and the relay enforces per frame (sizes, counts, `limit`
//! clamps); **limits** (`[limits]`) are the admission limiter's quotas (rates per tier, handler
//! permits), which no NIP describes.

mod access;
mod cluster;
mod de;
mod groups;
mod load;
mod media;
pub mod quota;
mod reviews;
mod sections;
mod sync;

pub use access::{AccessConfig, AccessMode};
pub use cluster::{LimiterBackend, NodeConfig, RedisUnavailable, StorageBackend, host_name, redis_url_problem};
pub use groups::{GroupCreators, GroupsConfig};
pub use load::ConfigError;
pub use media::{MediaConfig, MediaStore, Secret, Uploaders};
pub use quota::{LimitKey, QuotaKey, Source, Tier, TierLimits};
pub use reviews::ModerationConfig;
pub use sections::*;
pub use sync::{Direction, SyncConfig, SyncPeer, peer_url_problem};
