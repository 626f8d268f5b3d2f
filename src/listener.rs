//! The accept loop: connection caps, request timeouts, TCP_NODELAY on every accepted socket, the
//! peer address for the routes, and graceful shutdown.
//!
//! Owns turning a bound listener and a warp filter into a running HTTP/WebSocket server, and
//! keeping sockets from being held: at most `server.max_connections` open, at most
//! `server.max_connections_per_ip` from one peer address (a trusted proxy is counted only in the
//! total), a request head within `server.header_timeout_secs` (also between keep-alive requests)
//! and a whole request within `server.body_timeout_secs`. A connection past a cap is answered
//! `503` with `Retry-After` and closed. warp's own `serve` can do none of this; without
//! TCP_NODELAY every small reply (an OK, an EOSE) can wait for a delayed ACK (Nagle).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use warp::Filter;
use warp::reply::Reply;

use crate::config::Config;
use crate::http::PeerAddr;
use crate::http::front::{Front, FrontResponse, boxed};
use futures_util::FutureExt;
use futures_util::future::Either;

/// A connection's place under the caps, as a request extension: an upgraded WebSocket holds it
/// (see [`held`]) until it closes, since the HTTP connection ends at the upgrade.
#[derive(Clone)]
pub struct Held {
    _ticket: Arc<Ticket>,
}

/// A filter extracting the connection's place under the caps.
pub fn held() -> impl Filter<Extract = (Option<Held>,), Error = Infallible> + Clone {
    warp::ext::optional::<Held>()
}

/// What the accept loop enforces.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest wait for a request head.
    pub header_timeout: Duration,
    /// Longest time for a whole request (head, body and answer; not an upgraded WebSocket).
    pub body_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one peer address at most.
    pub max_connections_per_ip: usize,
    /// Peers counted only in the total (reverse proxies carry many clients).
    pub trusted_proxies: Vec<IpAddr>,
}

impl Limits {
    /// The limits of `[server]`, with `auth.trusted_proxies` exempt from the per-IP cap.
    pub fn of(config: &Config) -> Limits {
        let (server, trusted_proxies) = (&config.server, &config.auth.trusted_proxies);
        Limits {
            header_timeout: Duration::from_secs(server.header_timeout_secs),
            body_timeout: Duration::from_secs(server.body_timeout_secs),
            max_connections: server.max_connections,
            max_connections_per_ip: server.max_connections_per_ip,
            trusted_proxies: trusted_proxies.to_vec(),
        }
    }
}

/// Why a connection was turned away (the metric's `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Full {
    Total,
    PerIp,
}

impl Full {
    fn as_str(self) -> &'static str {
        match self {
            Full::Total => "max_connections",
            Full::PerIp => "max_connections_per_ip",
        }
    }
}

/// Open connections, in all and per peer address.
#[derive(Default)]
struct Gate {
    total: AtomicUsize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; dropping it frees its place.
pub struct Ticket {
    gate: Arc<Gate>,
    ip: Option<IpAddr>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(ip) = self.ip {
            let mut per_ip = self.gate.per_ip.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = per_ip.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    per_ip.remove(&ip);
                }
            }
        }
    }
}

impl Gate {
    fn enter(self: &Arc<Self>, ip: IpAddr, limits: &Limits) -> Result<Ticket, Full> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= limits.max_connections {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::Total);
        }
        let counted = (!limits.trusted_proxies.contains(&ip)).then_some(ip);
        if let Some(ip) = counted {
            let mut per_ip = self.per_ip.lock().unwrap_or_else(PoisonError::into_inner);
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= limits.max_connections_per_ip {
                drop(per_ip);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return Err(Full::PerIp);
            }
            *n += 1;
        }
        Ok(Ticket { gate: self.clone(), ip: counted })
    }
}

/// Logs `message` at most once a second per `last` (a flood must not flood the log too).
fn warn_throttled(last: &AtomicU64, message: impl FnOnce()) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if last.swap(now, Ordering::Relaxed) != now {
        message();
    }
}

/// The answer to a connection past a cap.
fn unavailable(full: Full) -> hyper::Response<String> {
    let body = serde_json::json!({
        "error": format!("rate-limited: too many connections ({}); retry in 1s", full.as_str()),
        "limit_type": full.as_str(),
        "retry_after_secs": 1,
    })
    .to_string();
    let mut response = hyper::Response::new(body);
    *response.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    headers.insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    response
}

/// The answer to a request that did not arrive within the body timeout.
fn timed_out() -> warp::reply::Response {
    let mut response = warp::reply::with_status(
        warp::reply::json(&serde_json::json!({"error": "the request took too long to arrive"})),
        warp::http::StatusCode::REQUEST_TIMEOUT,
    )
    .into_response();
    response.headers_mut().insert(warp::http::header::CONNECTION, warp::http::HeaderValue::from_static("close"));
    response
}

/// Serves `routes` on `listener` until `shutdown` resolves, then waits for open HTTP exchanges
/// (upgraded WebSockets are tracked by their own tasks).
pub async fn serve<F>(
    listener: tokio::net::TcpListener,
    (routes, front): (F, Option<Arc<dyn Front>>),
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) where
    F: Filter<Error = Infallible> + Clone + Send + Sync + 'static,
    F::Extract: Reply,
{
    // hyper's HTTP/1 connection itself, not the auto-detecting one: that one first waits for
    // enough bytes to tell HTTP/2's preface apart, with no timeout, so a silent socket (or one
    // that sent "PRI" and stopped) would be held for ever before any header timeout started.
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let mut refused_builder = http1::Builder::new();
    refused_builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout.min(Duration::from_secs(1)))
        .keep_alive(false);
    let (stop, connections) = (CancellationToken::new(), TaskTracker::new());
    let gate = Arc::new(Gate::default());
    let (accept_warned, full_warned) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn_throttled(&accept_warned, || tracing::warn!(error = %e, "accept failed"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let ticket = match gate.enter(peer.ip(), &limits) {
            Ok(ticket) => ticket,
            Err(full) => {
                metrics::counter!("hearth_connections_refused_total", "reason" => full.as_str()).increment(1);
                warn_throttled(
                    &full_warned,
                    || tracing::warn!(peer = %peer, cap = full.as_str(), "connection refused"),
                );
                let service =
                    hyper::service::service_fn(move |_| async move { Ok::<_, Infallible>(boxed(unavailable(full))) });
                let conn = refused_builder.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                continue;
            }
        };
        let ticket = Arc::new(ticket);
        let for_requests = ticket.clone();
        let svc = warp::service(routes.clone());
        let body_timeout = limits.body_timeout;
        let front = front.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            if let Some(front) = front.as_ref().filter(|f| f.claims(req.method(), req.uri().path())) {
                let answer = front.answer(req, peer);
                return Either::Left(FutureExt::map(answer, Ok::<FrontResponse, Infallible>));
            }
            req.extensions_mut().insert(PeerAddr(peer));
            req.extensions_mut().insert(Held { _ticket: for_requests.clone() });
            let upgrade = req.headers().contains_key(hyper::header::UPGRADE);
            if upgrade {
                let on = hyper::upgrade::on(&mut req);
                req.extensions_mut().insert(crate::ws::upgrade::UpgradeSlot::new(on));
            }
            let mut svc = svc.clone();
            let call = tower_service::Service::call(&mut svc, req);
            Either::Right(async move {
                match tokio::time::timeout(body_timeout, call).await {
                    Ok(answered) => answered.map(boxed),
                    // A body shorter than its Content-Length, or one trickled in: answered and
                    // closed, so the socket is not held.
                    Err(_) => Ok(boxed(timed_out())),
                }
            })
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
        let stop = stop.clone();
        connections.spawn(async move {
            // Held until the connection (and any WebSocket upgraded from it) is done.
            let _ticket = ticket;
            let mut conn = std::pin::pin!(conn);
            let ended = tokio::select! {
                ended = conn.as_mut() => ended,
                _ = stop.cancelled() => {
                    // Finish the exchange in progress, then close.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
}
