//! The workloads: generation, ingest, query mix, fan-out, physical bounds, and the suites.
//!
//! `generate` writes signed events, `workloads` drives one relay with one load each, `sockets`
//! holds idle connections on one, `harness` starts release binaries and reads their memory,
//! `suites` runs the workloads together, `scale` measures one store size from ingest to restarts,
//! `crash` kills a relay while clients publish and checks what it acknowledged.

mod crash;
mod generate;
mod harness;
mod scale;
mod sockets;
mod suites;
mod workloads;

// Each part reaches the others' helpers through `use super::*`.
use generate::*;
use harness::*;

pub(crate) use crash::crash;
pub(crate) use generate::gen_file;
pub(crate) use scale::scale;
pub(crate) use sockets::idle;
pub(crate) use suites::{smoke, suite};
pub(crate) use workloads::{bound, fanout, ingest, limiter, query, rtt};

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

pub(super) type Res<T> = Result<T, String>;
pub(super) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub(super) const QUIET: Duration = Duration::from_secs(30);

pub(super) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub(super) async fn connect(url: &str) -> Res<Ws> {
    let (ws, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(hearth::client::session::socket_config()), true)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
    Ok(ws)
}

/// The next text frame (skipping pings), or None at the end / after `QUIET`.
pub(super) async fn next_text(rx: &mut futures_util::stream::SplitStream<Ws>) -> Option<String> {
    loop {
        match tokio::time::timeout(QUIET, rx.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Some(t.as_str().to_string()),
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => return None,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// The next text frame as JSON (skipping pings), or None at the end / after `QUIET`.
pub(super) async fn next_frame(rx: &mut futures_util::stream::SplitStream<Ws>) -> Option<Value> {
    serde_json::from_str(&next_text(rx).await?).ok()
}
