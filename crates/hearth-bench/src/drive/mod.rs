//! The workloads: generation, ingest, query mix, fan-out, physical bounds, and the suites.
//!
//! `generate` writes signed events, `workloads` drives one relay with one load each, `sockets`
//! holds idle connections on one, `harness` starts release binaries and reads their memory,
//! `suites` runs the workloads together, `scale` measures one store size from ingest to restarts,
//! `crash` kills a relay while clients publish and checks what it acknowledged, `sync` times one
//! NIP-77 round between two stores, `search` NIP-50's index beside the store, `chat` a public
//! chat's rooms on any relay.

mod bounds;
mod chat;
mod cluster;
mod crash;
mod generate;
mod groups;
mod harness;
mod media;
mod postgres;
mod scale;
mod search;
mod sockets;
mod suites;
mod sync;
mod vanish;
mod workloads;

// Each part reaches the others' helpers through `use super::*`.
use generate::*;
use harness::*;

pub(crate) use bounds::{bound, limiter};
pub(crate) use chat::{Chat, chat};
pub(crate) use cluster::cluster;
pub(crate) use crash::{Kills, crash};
pub(crate) use generate::{gen_file, gen_file_with};
pub(crate) use groups::groups;
pub(crate) use media::media;
pub(crate) use postgres::postgres;
pub(crate) use scale::{compact_under_ingest, scale};
pub(crate) use search::search;
pub(crate) use sockets::{idle, subs};
pub(crate) use suites::{smoke, suite};
pub(crate) use sync::sync;
pub(crate) use vanish::vanish;
pub(crate) use workloads::{fanout, ingest, query, rtt};

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// One subcommand's results.
pub(crate) struct Report {
    /// One JSON line.
    pub json: Value,
    /// A readable summary.
    pub summary: String,
}

impl Report {
    /// A latency report's `p50_ms` and `p99_ms` (0 where missing).
    pub(crate) fn p50_p99(&self) -> (f64, f64) {
        let ms = |field: &str| self.json[field].as_f64().unwrap_or(0.0);
        (ms("p50_ms"), ms("p99_ms"))
    }
}

pub(super) type Res<T> = Result<T, String>;
pub(super) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub(super) const QUIET: Duration = Duration::from_secs(30);

pub(super) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub(super) async fn connect(url: &str) -> Res<Ws> {
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(hearth::client::ws::socket_config()), true)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    Ok(ws)
}

/// The next text frame (skipping pings), or None at the end / after `QUIET` without one (a
/// relay's pings do not extend it).
pub(super) async fn next_text(rx: &mut futures_util::stream::SplitStream<Ws>) -> Option<String> {
    let quiet_at = tokio::time::Instant::now() + QUIET;
    loop {
        match tokio::time::timeout_at(quiet_at, rx.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Some(t.as_str().to_string()),
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => return None,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// The stored events `filter` gets from the relay at `relay` on a connection of its own, in
/// order, up to EOSE.
pub(super) async fn req(relay: &str, filter: Value) -> Res<Vec<hearth::protocol::Event>> {
    let (mut tx, mut rx) = connect(relay).await?.split();
    futures_util::SinkExt::send(&mut tx, Message::text(serde_json::json!(["REQ", "r", filter]).to_string()))
        .await
        .map_err(err)?;
    let mut out = Vec::new();
    loop {
        let frame = next_frame(&mut rx).await.ok_or("the relay went quiet during a REQ")?;
        match frame[0].as_str() {
            Some("EVENT") => out.push(serde_json::from_value(frame[2].clone()).map_err(err)?),
            Some("EOSE") => return Ok(out),
            // NIP-42: the relay's challenge comes first; these reads need no AUTH.
            Some("AUTH") => {}
            _ => return Err(format!("unexpected frame during a REQ: {frame}")),
        }
    }
}

/// The next text frame as JSON (skipping pings), or None at the end / after `QUIET`.
pub(super) async fn next_frame(rx: &mut futures_util::stream::SplitStream<Ws>) -> Option<Value> {
    serde_json::from_str(&next_text(rx).await?).ok()
}
