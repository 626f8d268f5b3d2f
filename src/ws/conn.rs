//! One WebSocket connection: read frames, answer each one, deliver live events.
//!
//! Owns the per-connection loop. Frames are parsed purely ([`ClientMessage::parse`]); EVENTs and
//! queries run concurrently (up to `server.max_in_flight` per connection) so a client can keep
//! many EVENTs in flight while each waits for its durable OK. Every reply is written directly by
//! this loop, so an `OK` is never dropped; only live events pass through the bounded fan-out queue,
//! and a client that lets that queue fill is disconnected with a NOTICE.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, SplitSink};
use futures_util::{SinkExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use warp::ws::{Message, WebSocket};

use crate::app::AppState;
use crate::fanout::{ConnId, Registration};
use crate::ingest::{self, Publisher};
use crate::protocol::{ClientMessage, Filter, ParseError, RelayMessage, Timestamp};
use crate::ws::session::{Session, prepare_filters};

/// What the HTTP upgrade knew about the client.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The TCP peer.
    pub peer: Option<SocketAddr>,
    /// The `Host` header of the upgrade request.
    pub host: Option<String>,
}

/// The result of work that ran concurrently with the read loop.
enum Done {
    /// Frames to send as they are.
    Frames(Vec<RelayMessage>),
    /// Stored events + EOSE of a REQ; dropped if the subscription changed meanwhile.
    Query { sub_id: String, generation: u64, frames: Vec<RelayMessage> },
}

/// What handling one frame asks of the loop.
enum Action {
    Reply(RelayMessage),
    Spawn(BoxFuture<'static, Done>),
    Nothing,
}

type Sink = SplitSink<WebSocket, Message>;

/// How long a closing connection may take to finish its in-flight frames.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);
/// How long a slow consumer's last NOTICE may wait for room in its socket.
const SLOW_NOTICE_WAIT: Duration = Duration::from_secs(10);
/// How long the close frame may take to write.
const FINAL_WRITE: Duration = Duration::from_secs(1);

/// Serves one upgraded WebSocket until the client leaves or the relay shuts down.
pub async fn serve(app: Arc<AppState>, ws: WebSocket, info: ConnInfo) {
    let mut reg = app.fanout.register(app.config.server.max_outbound_queue);
    let span = tracing::info_span!("conn", peer = ?info.peer, conn_id = reg.id);
    async move {
        tracing::debug!("connected");
        metrics::gauge!("hearth_connections_open").increment(1.0);
        run(&app, ws, &mut reg).await;
        metrics::gauge!("hearth_connections_open").decrement(1.0);
        tracing::debug!("disconnected");
    }
    .instrument(span)
    .await
}

async fn run(app: &Arc<AppState>, ws: WebSocket, reg: &mut Registration) {
    let (mut sink, mut stream) = ws.split();
    let mut session = Session::default();
    let mut in_flight: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    let max_in_flight = app.config.server.max_in_flight;
    loop {
        tokio::select! {
            biased;
            _ = app.shutdown.cancelled() => break,
            _ = reg.slow.cancelled() => break,
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                if !guarded(deliver(&mut sink, &session, done), &reg.slow, &app.shutdown).await {
                    break;
                }
            }
            Some(live) = reg.rx.recv() => {
                if !guarded(send(&mut sink, &live), &reg.slow, &app.shutdown).await {
                    break;
                }
            }
            frame = stream.next(), if in_flight.len() < max_in_flight => {
                let msg = match frame {
                    Some(Ok(msg)) => msg,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "read failed");
                        break;
                    }
                    None => break,
                };
                if msg.is_close() {
                    break;
                }
                let action = if let Ok(text) = msg.to_str() {
                    handle(app, &mut session, reg.id, text)
                } else if msg.is_binary() {
                    Action::Reply(RelayMessage::Notice("invalid: binary frames are not supported; send text".into()))
                } else {
                    Action::Nothing
                };
                match action {
                    Action::Reply(reply) => {
                        if !guarded(send(&mut sink, &reply), &reg.slow, &app.shutdown).await {
                            break;
                        }
                    }
                    Action::Spawn(fut) => in_flight.push(fut),
                    Action::Nothing => {}
                }
            }
        }
    }
    if reg.slow.is_cancelled() {
        tracing::info!("disconnecting a slow consumer");
        let notice =
            RelayMessage::Notice("error: disconnected: the client is not reading its events fast enough".into());
        // The socket is full: give the client a while to drain it and learn why.
        let _ = tokio::time::timeout(SLOW_NOTICE_WAIT, send(&mut sink, &notice)).await;
    }
    // Finish what was accepted for processing: EVENTs complete (durable either way) and get
    // their OK while the client still reads, within a deadline so a stuck client cannot hold
    // shutdown.
    let deadline = tokio::time::Instant::now() + DRAIN_DEADLINE;
    let mut writable = !reg.slow.is_cancelled();
    while let Ok(Some(done)) = tokio::time::timeout_at(deadline, in_flight.next()).await {
        if writable {
            writable = tokio::time::timeout_at(deadline, deliver(&mut sink, &session, done)).await.unwrap_or(false);
        }
    }
    // The registration's drop removes every subscription of the connection.
    if writable {
        let _ = tokio::time::timeout(FINAL_WRITE, sink.send(Message::close())).await;
    }
}

/// Awaits a write unless the connection is cut off or the relay shuts down meanwhile (a client
/// that stops reading must not hold either up); false = stop serving.
async fn guarded(
    write: impl std::future::Future<Output = bool>,
    slow: &CancellationToken,
    shutdown: &CancellationToken,
) -> bool {
    tokio::select! {
        ok = write => ok,
        _ = slow.cancelled() => false,
        _ = shutdown.cancelled() => false,
    }
}

async fn send(sink: &mut Sink, msg: &RelayMessage) -> bool {
    sink.send(Message::text(msg.to_json())).await.is_ok()
}

async fn deliver(sink: &mut Sink, session: &Session, done: Done) -> bool {
    let frames = match done {
        Done::Frames(frames) => frames,
        Done::Query { sub_id, generation, frames } => {
            if !session.is_current(&sub_id, generation) {
                return true;
            }
            frames
        }
    };
    for frame in &frames {
        if sink.feed(Message::text(frame.to_json())).await.is_err() {
            return false;
        }
    }
    sink.flush().await.is_ok()
}

/// Answers a frame too large to process, correlated where it can be.
fn oversized(text: &str, limit: usize) -> RelayMessage {
    let reason = format!("invalid: message is {} bytes, the limit is {limit}", text.len());
    match ClientMessage::parse(text) {
        Ok(ClientMessage::Event(e)) | Ok(ClientMessage::Auth(e)) => RelayMessage::ok(e.id.to_hex(), false, reason),
        Ok(ClientMessage::Req { sub_id, .. }) | Ok(ClientMessage::Count { sub_id, .. }) => {
            RelayMessage::Closed { sub_id, message: reason }
        }
        Err(ParseError::BadEvent { id, .. }) => RelayMessage::ok(id, false, reason),
        Err(ParseError::BadSubscription { sub_id, .. }) => RelayMessage::Closed { sub_id, message: reason },
        Ok(ClientMessage::Close(_)) | Err(ParseError::Uncorrelated(_)) => RelayMessage::Notice(reason),
    }
}

fn handle(app: &Arc<AppState>, session: &mut Session, conn: ConnId, text: &str) -> Action {
    let lim = &app.config.limitation;
    if text.len() > lim.max_message_length {
        return Action::Reply(oversized(text, lim.max_message_length));
    }
    let msg = match ClientMessage::parse(text) {
        Ok(msg) => msg,
        Err(e) => {
            tracing::debug!(error = %e, "unparseable frame");
            return Action::Reply(e.reply());
        }
    };
    metrics::counter!("hearth_frames_total").increment(1);
    match msg {
        ClientMessage::Event(event) => {
            let app = app.clone();
            Action::Spawn(Box::pin(async move {
                metrics::counter!("hearth_events_received_total").increment(1);
                let id = event.id.to_hex();
                let outcome = ingest::publish(&app, *event, Publisher::default()).await;
                Done::Frames(vec![RelayMessage::ok(id, outcome.accepted(), outcome.message())])
            }))
        }
        ClientMessage::Req { sub_id, mut filters } => {
            if let Err(reason) = prepare_filters(lim, &sub_id, &mut filters) {
                return Action::Reply(RelayMessage::Closed { sub_id, message: format!("error: {reason}") });
            }
            let generation = match session.open(&sub_id, lim.max_subscriptions) {
                Ok(g) => g,
                Err(reason) => {
                    return Action::Reply(RelayMessage::Closed { sub_id, message: format!("error: {reason}") });
                }
            };
            app.fanout.subscribe(conn, &sub_id, filters.clone());
            Action::Spawn(Box::pin(query(app.clone(), conn, sub_id, generation, filters)))
        }
        ClientMessage::Count { sub_id, mut filters } => {
            if let Err(reason) = prepare_filters(lim, &sub_id, &mut filters) {
                return Action::Reply(RelayMessage::Closed { sub_id, message: format!("error: {reason}") });
            }
            Action::Spawn(Box::pin(count(app.clone(), sub_id, filters)))
        }
        ClientMessage::Close(sub_id) => {
            session.close(&sub_id);
            app.fanout.unsubscribe(conn, &sub_id);
            Action::Nothing
        }
        ClientMessage::Auth(event) => Action::Reply(RelayMessage::ok(
            event.id.to_hex(),
            false,
            "restricted: this relay does not support AUTH yet",
        )),
    }
}

/// Runs blocking store work off the reactor; either failure becomes its text.
async fn blocking<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

async fn query(app: Arc<AppState>, conn: ConnId, sub_id: String, generation: u64, filters: Vec<Filter>) -> Done {
    let store = app.store.clone();
    let frames = match blocking(move || store.query(&filters, Timestamp::now())).await {
        Ok(events) => {
            let mut frames: Vec<RelayMessage> =
                events.into_iter().map(|event| RelayMessage::Event { sub_id: sub_id.clone(), event }).collect();
            frames.push(RelayMessage::Eose(sub_id.clone()));
            frames
        }
        Err(e) => {
            tracing::error!(error = %e, "query failed");
            app.fanout.unsubscribe(conn, &sub_id);
            vec![RelayMessage::Closed { sub_id: sub_id.clone(), message: "error: the query failed".into() }]
        }
    };
    Done::Query { sub_id, generation, frames }
}

async fn count(app: Arc<AppState>, sub_id: String, filters: Vec<Filter>) -> Done {
    let store = app.store.clone();
    let frame = match blocking(move || store.count(&filters, Timestamp::now())).await {
        Ok(count) => RelayMessage::Count { sub_id, count },
        Err(e) => {
            tracing::error!(error = %e, "count failed");
            RelayMessage::Closed { sub_id, message: "error: the count failed".into() }
        }
    };
    Done::Frames(vec![frame])
}
