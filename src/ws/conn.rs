//! One WebSocket connection: read frames, answer each one, deliver live events.
//!
//! Owns the per-connection loop; what each frame means is `handle`'s. EVENTs and queries run
//! concurrently (up to `server.max_in_flight` per connection) so a client can keep many EVENTs in
//! flight while each waits for its durable OK. Every reply is written directly by this loop, so
//! an `OK` is never dropped; only live events pass through the bounded fan-out queue, and a
//! client that lets that queue fill is disconnected with a NOTICE.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, SplitSink, SplitStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::action::{Action, Done};
use super::handle;
use super::session::Session;
use super::upgrade::Socket as WebSocket;
use crate::app::AppState;
use crate::fanout::{ConnId, Registration};
use crate::frame_log::FrameLog;
use crate::http::client_ip;
use crate::limiter::Principal;
use crate::protocol::RelayMessage;
use crate::protocol::nip42::RelayMatch;

/// What the HTTP upgrade knew about the client.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The TCP peer.
    pub peer: Option<SocketAddr>,
    /// The client's address (the peer, or what a trusted proxy says).
    pub client_ip: Option<IpAddr>,
    /// The `Host` header of the upgrade request.
    pub host: Option<String>,
}

/// Where a connection's frames are logged, when the frame log is on (`hearth dev`).
#[derive(Clone, Copy)]
struct Tap<'a> {
    log: Option<&'a FrameLog>,
    conn: ConnId,
}

type Sink = SplitSink<WebSocket, Message>;
type Stream = SplitStream<WebSocket>;

/// Live frames written with one flush at most.
const LIVE_BATCH: usize = 256;
/// How long a closing connection may take to finish its in-flight frames.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);
/// How long a slow consumer's last NOTICE may wait for room in its socket.
const SLOW_NOTICE_WAIT: Duration = Duration::from_secs(10);
/// How long the close frame may take to write.
const FINAL_WRITE: Duration = Duration::from_secs(1);

/// Serves one upgraded WebSocket until the client leaves or the relay shuts down.
pub async fn serve(app: Arc<AppState>, ws: Box<WebSocket>, info: ConnInfo) {
    let ip = info.client_ip.unwrap_or(client_ip::UNKNOWN);
    let server = &app.config.server;
    let mut reg = app.fanout.register(server.max_outbound_queue, server.max_outbound_bytes, Principal::Ip(ip));
    let span = tracing::info_span!("conn", peer = ?info.peer, conn_id = reg.id);
    metrics::gauge!("hearth_connections_open").increment(1.0);
    let (sink, stream) = (*ws).split();
    run(&app, sink, stream, &mut reg, info).instrument(span).await;
    metrics::gauge!("hearth_connections_open").decrement(1.0);
}

/// The connection's loop. It waits, idle, for most of a connection's life, so what it holds
/// then is what every open socket costs: each branch's work (a batch of replies, a ping, the
/// final drain) runs in a boxed future of its own, allocated only while it runs, so the loop's
/// own state stays small.
async fn run(app: &Arc<AppState>, mut sink: Sink, mut stream: Stream, reg: &mut Registration, info: ConnInfo) {
    tracing::debug!("connected");
    let tap = Tap { log: app.frame_log.get(), conn: reg.id };
    if let Some(log) = tap.log {
        log.connected(reg.id, info.peer);
    }
    let mut session = Session::new(info.client_ip.unwrap_or(client_ip::UNKNOWN), handle::challenge());
    let relay_match = RelayMatch::of(&app.config.server.public_url, info.host);
    if !Box::pin(send(&mut sink, &RelayMessage::Auth(session.challenge.clone()), tap)).await {
        return;
    }
    let mut in_flight: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    let max_in_flight = app.config.server.max_in_flight;
    // A peer that vanished without a close keeps its subscriptions only until it fails to
    // answer a ping: one interval to answer, then it is closed.
    let ping_every = Duration::from_secs(app.config.server.ping_interval_secs);
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    let mut unanswered = false;
    let guard = Guard {
        slow: reg.slow.clone(),
        shutdown: app.shutdown.clone(),
        slow_consumer: Duration::from_millis(app.config.server.slow_consumer_ms),
    };
    // Why the relay ends the connection, when it is for a protocol error (RFC 6455 §7.4.1).
    let mut close: Option<CloseFrame> = None;
    loop {
        tokio::select! {
            biased;
            _ = app.shutdown.cancelled() => break,
            _ = reg.slow.cancelled() => break,
            _ = ping.tick() => {
                if unanswered {
                    tracing::debug!("no pong within the ping interval; closing");
                    break;
                }
                unanswered = true;
                // Sync sessions idle past `sync.idle_secs` end here, checked at each ping.
                let idle = Duration::from_secs(app.config.sync.idle_secs);
                let expired = session.negs.expire(std::time::Instant::now(), idle);
                let sent = async {
                    for frame in &expired {
                        if !feed(&mut sink, frame, tap).await {
                            return false;
                        }
                    }
                    sink.send(Message::Ping(Default::default())).await.is_ok()
                };
                if !Box::pin(guarded(sent, &guard)).await {
                    break;
                }
            }
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                // Every result that is ready goes out in one write: a group commit finishes
                // many EVENTs at once, and one syscall per OK would cost more than the OK.
                let batch = async {
                    let mut more = Some(done);
                    while let Some(done) = more.take() {
                        if !deliver(&mut sink, &mut session, app, tap, done).await {
                            return false;
                        }
                        more = in_flight.next().now_or_never().flatten();
                    }
                    sink.flush().await.is_ok()
                };
                if !Box::pin(guarded(batch, &guard)).await {
                    break;
                }
            }
            live = reg.recv() => {
                // Every live frame that is queued goes out in one write: one flush per frame
                // made the relay's own writer the slow one under a burst.
                let batch = async {
                    let mut next = Some(live);
                    let mut written = 0;
                    while let Some(live) = next.take() {
                        if session.admits(&live) && !feed(&mut sink, &live.frame(), tap).await {
                            return false;
                        }
                        reg.written(&live);
                        written += 1;
                        if written < LIVE_BATCH {
                            next = reg.try_recv();
                        }
                    }
                    sink.flush().await.is_ok()
                };
                if !Box::pin(guarded(batch, &guard)).await {
                    break;
                }
            }
            frame = stream.next(), if in_flight.len() < max_in_flight => {
                let msg = match frame {
                    Some(Ok(msg)) => msg,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "read failed");
                        close = close_for(&e);
                        break;
                    }
                    None => break,
                };
                // Whatever the peer sends shows it is there, a pong or any other frame.
                unanswered = false;
                let action = match &msg {
                    Message::Close(_) => break,
                    Message::Text(text) => {
                        if let Some(log) = tap.log {
                            log.inbound(reg.id, text.as_str());
                        }
                        handle::frame(app, &mut session, reg.id, text.as_str(), relay_match.as_ref()).await
                    }
                    Message::Binary(_) => {
                        Action::Reply(RelayMessage::Notice("invalid: binary frames are not supported; send text".into()))
                    }
                    // Pings are answered by tungstenite itself.
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Action::Nothing,
                };
                match action {
                    Action::Reply(reply) => {
                        if !Box::pin(guarded(send(&mut sink, &reply, tap), &guard)).await {
                            break;
                        }
                    }
                    Action::Spawn(fut) => in_flight.push(fut),
                    Action::Nothing => {}
                }
            }
        }
    }
    Box::pin(finish(app, sink, session, reg, in_flight, close, tap)).await;
    if let Some(log) = tap.log {
        log.closed(reg.id);
    }
    tracing::debug!("disconnected");
}

/// Ends a connection: tells a slow consumer why, finishes the work accepted for processing, and
/// sends the close frame.
async fn finish(
    app: &AppState,
    mut sink: Sink,
    mut session: Session,
    reg: &Registration,
    mut in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    mut close: Option<CloseFrame>,
    tap: Tap<'_>,
) {
    if reg.slow.is_cancelled() {
        tracing::info!("disconnecting a slow consumer");
        close = Some(CloseFrame { code: CloseCode::Policy, reason: "slow consumer".into() });
        let notice =
            RelayMessage::Notice("error: disconnected: the client is not reading its events fast enough".into());
        // The socket is full: give the client a while to drain it and learn why.
        let _ = tokio::time::timeout(SLOW_NOTICE_WAIT, send(&mut sink, &notice, tap)).await;
    }
    // Finish what was accepted for processing: EVENTs complete (durable either way) and get
    // their OK while the client still reads, within a deadline so a stuck client cannot hold
    // shutdown.
    let deadline = tokio::time::Instant::now() + DRAIN_DEADLINE;
    let mut writable = !reg.slow.is_cancelled();
    while let Ok(Some(done)) = tokio::time::timeout_at(deadline, in_flight.next()).await {
        if writable {
            let write = async { deliver(&mut sink, &mut session, app, tap, done).await && sink.flush().await.is_ok() };
            writable = tokio::time::timeout_at(deadline, write).await.unwrap_or(false);
        }
    }
    // The registration's drop removes every subscription of the connection.
    if writable || close.is_some() {
        let _ = tokio::time::timeout(FINAL_WRITE, sink.send(Message::Close(close))).await;
    }
}

/// The close frame that answers a read error: 1002 for a broken frame, 1007 for text that is
/// not UTF-8, 1009 for a frame past the size the relay reads at all; none for a connection that
/// merely went away.
fn close_for(e: &WsError) -> Option<CloseFrame> {
    let (code, reason) = match e {
        WsError::Protocol(_) => (CloseCode::Protocol, "protocol error"),
        WsError::Utf8(_) => (CloseCode::Invalid, "text frame is not UTF-8"),
        WsError::Capacity(_) => (CloseCode::Size, "frame too large"),
        _ => return None,
    };
    Some(CloseFrame { code, reason: reason.into() })
}

/// Awaits a write unless the connection is cut off or the relay shuts down meanwhile (a client
/// that stops reading must not hold either up); false = stop serving. A write the socket does
/// not take within `server.slow_consumer_ms` marks the client a slow consumer: its kernel
/// buffer stayed full that long, so it is not reading.
async fn guarded(write: impl std::future::Future<Output = bool>, guard: &Guard) -> bool {
    let mut write = std::pin::pin!(write);
    // Most writes are taken at once: only a write that has to wait arms the timers.
    if let Some(ok) = write.as_mut().now_or_never() {
        return ok;
    }
    tokio::select! {
        ok = write => ok,
        _ = guard.slow.cancelled() => false,
        _ = guard.shutdown.cancelled() => false,
        _ = tokio::time::sleep(guard.slow_consumer) => {
            metrics::counter!("hearth_slow_consumers_total").increment(1);
            guard.slow.cancel();
            false
        }
    }
}

/// What every write of a connection is bounded by.
struct Guard {
    /// Cancelled when the client is cut off as a slow consumer.
    slow: CancellationToken,
    /// The relay's shutdown.
    shutdown: CancellationToken,
    /// `server.slow_consumer_ms`.
    slow_consumer: Duration,
}

/// Writes one frame and flushes it.
async fn send(sink: &mut Sink, msg: &RelayMessage, tap: Tap<'_>) -> bool {
    feed(sink, msg, tap).await && sink.flush().await.is_ok()
}

/// Queues one frame for the next flush.
async fn feed(sink: &mut Sink, msg: &RelayMessage, tap: Tap<'_>) -> bool {
    if let Some(log) = tap.log {
        log.outbound(tap.conn, msg);
    }
    match text_of(msg) {
        Some(text) => sink.feed(text).await.is_ok(),
        None => false,
    }
}

/// The frame as a text message; `None` (logged) for one that does not serialize, which ends the
/// connection rather than send the client something else.
fn text_of(msg: &RelayMessage) -> Option<Message> {
    match msg.to_json() {
        Ok(text) => Some(Message::text(text)),
        Err(e) => {
            tracing::error!(error = %e, "a relay frame did not serialize");
            None
        }
    }
}

/// Queues the frames of one finished piece of work; the caller flushes.
async fn deliver(sink: &mut Sink, session: &mut Session, app: &AppState, tap: Tap<'_>, done: Done) -> bool {
    let conn = tap.conn;
    let frames = match done {
        Done::Frames(frames) => frames,
        Done::Query { sub_id, generation, mark, frames } => match session.answered(&sub_id, generation, mark, frames) {
            Some(frames) => frames,
            None => {
                // Closed or replaced while it ran: drop its results and its live registration.
                app.fanout.unsubscribe(conn, &sub_id, Some(generation));
                return true;
            }
        },
        Done::SubRefused { sub_id, generation, closed } => {
            if session.is_current(&sub_id, generation) {
                session.close(&sub_id);
            }
            vec![closed]
        }
        Done::Neg(done) => session.negs.finish(done).into_iter().collect(),
        Done::Auth { id, result } => match result {
            Ok(pubkey) => {
                session.authed = Some(pubkey);
                app.fanout.set_principal(conn, session.principal());
                tracing::debug!(%pubkey, "authenticated");
                vec![RelayMessage::ok(id, true, "")]
            }
            Err(message) => vec![RelayMessage::ok(id, false, message)],
        },
    };
    for frame in &frames {
        if !feed(sink, frame, tap).await {
            return false;
        }
    }
    true
}
