//! hearth: a self-contained Nostr relay.
//!
//! ```text
//!                 listener (accept, TCP_NODELAY) ─► server (routes)
//!                 ├─ ws::upgrade ─► ws::conn (loop) ─► ws::handle ─► one file per verb
//!                 ├─ rest ─┐
//!                 └─ admin ┴─► http (request context, ApiError, client IP, NIP-98)
//!
//! write: ws::event / rest / media ─► protocol (parse) ─► limiter.admit (ws_events / api_calls)
//!        ─► gate (door) ─► ingest: policy ─► permit ─► verify ─► kind rules (ingest::rules)
//!        ─► settle: moderation ─► dedup ─► admit(messages)
//!        ─► store (event log + sled, group commit) ─► fanout ─► live subscriptions
//! read:  ws::req / rest ─► protocol (parse) ─► limiter.admit ─► gate (read: the Viewer)
//!        ─► query: prepare filters ─► permit ─► store.query / count
//!        ─► EVENT… EOSE (then live events from fanout) / a JSON body
//! admin: admin ─► limiter (live limits, usage) · moderation · store (settings, audit)
//! ```
//!
//! Every refusal on the way is one of [`protocol::refusal`]'s types, mapped to `OK`/`CLOSED`/
//! `NOTICE` by `ws` and to a status and `Retry-After` by `http`. [`run`] (in `relay.rs`) takes a
//! bound listener and a shutdown future: the caller binds, the library serves.
//!
//! **The public API** is what embedders and tests need: the relay ([`Relay`], [`run`]), its
//! [`config`], the [`client`] library, [`testing`] (a relay, and PostgreSQL, in another project's
//! tests) and the [`protocol`] types they speak. Beside them, for the workspace's other parts:
//! the `hearth` binary's [`cli`], [`offline`], [`dev`] and [`sync`]; `crates/hearth-bench`'s
//! [`limiter`] and [`cluster`] (it measures them alone); the fuzz targets' [`fuzz`]; and the
//! [`store`] (the offline tools and the micro benchmarks). Every other module is the crate's own.
//!
//! This file only declares the modules and re-exports the API; nothing imports it. The modules
//! are floors that import only the floors below them (docs/src/architecture.md; `tests/layers.rs` checks
//! it from the code's own imports).

pub(crate) mod admin;
pub(crate) mod app;
pub(crate) mod audit;
pub(crate) mod backup;
pub(crate) mod blobs;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub(crate) mod delivery;
pub mod dev;
pub(crate) mod fanout;
pub(crate) mod frame_log;
pub mod fuzz;
pub(crate) mod gate;
pub(crate) mod groups;
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
pub mod offline;
pub mod protocol;
pub(crate) mod query;
pub(crate) mod relay;
pub(crate) mod report_hold;
pub(crate) mod rest;
pub(crate) mod search;
pub(crate) mod server;
pub(crate) mod stats;
pub mod store;
pub(crate) mod subscription_caps;
pub mod sync;
pub mod testing;
pub(crate) mod vanish;
pub(crate) mod ws;

pub use metrics::{Heap, report_heap_with};
pub use server::ROUTES;

pub use relay::{Relay, RunError, run};
