//! hearth: a self-contained Nostr relay.
//!
//! ```text
//!                 listener (accept, TCP_NODELAY) ─► server (routes)
//!                 ├─ ws::upgrade ─► ws::conn (loop) ─► ws::handle (one handler per verb)
//!                 ├─ rest ─┐
//!                 └─ admin ┴─► http (request context, ApiError, client IP, NIP-98)
//!
//! write: ws::handle / rest ─► protocol (parse) ─► limiter.admit (ws_events / api_calls)
//!        ─► ingest: policy ─► permit ─► verify ─► moderation ─► dedup ─► admit(messages)
//!        ─► store (event log + sled, group commit) ─► fanout ─► live subscriptions
//! read:  ws::handle / rest ─► protocol (parse) ─► limiter.admit
//!        ─► query: prepare filters ─► permit ─► store.query / count
//!        ─► EVENT… EOSE (then live events from fanout) / a JSON body
//! admin: admin ─► limiter (live limits, usage) · moderation · store (settings, audit)
//! ```
//!
//! Every refusal on the way is one of [`protocol::refusal`]'s types, mapped to `OK`/`CLOSED`/
//! `NOTICE` by `ws` and to a status and `Retry-After` by `http`. [`run`] (in `relay.rs`) takes a
//! bound listener and a shutdown future: the caller binds, the library serves.
//!
//! This file only declares the modules and re-exports the API; nothing imports it. The modules
//! are floors that import only the floors below them (docs/src/architecture.md; `tests/layers.rs` checks
//! it from the code's own imports).

pub(crate) mod admin;
pub(crate) mod app;
pub(crate) mod audit;
pub mod backup;
pub mod blobs;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod dev;
pub(crate) mod fanout;
pub(crate) mod frames;
pub mod fuzz;
pub mod groups;
pub(crate) mod hold;
pub(crate) mod http;
pub(crate) mod identity;
pub(crate) mod ingest;
pub mod limiter;
pub(crate) mod listener;
pub(crate) mod media;
pub(crate) mod membership;
pub(crate) mod metrics;
pub(crate) mod moderation;
pub(crate) mod nip11;
pub(crate) mod nodes;
pub mod offline;
pub mod protocol;
pub(crate) mod query;
pub(crate) mod relay;
pub(crate) mod rest;
pub mod search;
pub(crate) mod server;
pub(crate) mod slots;
pub(crate) mod stats;
pub mod store;
pub mod sync;
pub mod testing;
pub(crate) mod vanish;
pub(crate) mod ws;

pub use metrics::{Heap, report_heap_with};
pub use server::ROUTES;

pub use relay::{Relay, RunError, run};
