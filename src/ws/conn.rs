//! One WebSocket connection: read frames, answer each one, deliver live events.
//!
//! Owns the per-connection loop. Frames are parsed purely ([`ClientMessage::parse`]); EVENTs and
//! queries run concurrently (up to `server.max_in_flight` per connection) so a client can keep
//! many EVENTs in flight while each waits for its durable OK. Every reply is written directly by
//! this loop, so an `OK` is never dropped; only live events pass through the bounded fan-out queue,
//! and a client that lets that queue fill is disconnected with a NOTICE.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, SplitSink};
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::app::AppState;
use crate::fanout::{ConnId, Registration};
use crate::ingest::{self, Publisher};
use crate::limiter::{LimitType, Principal, Refused};
use crate::protocol::nip42::{self, RelayMatch};
use crate::protocol::verify::verify;
use crate::protocol::{ClientMessage, Correlation, Event, Filter, PubKey, RelayMessage, Timestamp};
use crate::ws::session::{Session, prepare_filters};
use crate::ws::upgrade::Socket as WebSocket;

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

/// The result of work that ran concurrently with the read loop.
enum Done {
    /// Frames to send as they are.
    Frames(Vec<RelayMessage>),
    /// Stored events + EOSE of a REQ; dropped if the subscription changed meanwhile.
    Query { sub_id: String, generation: u64, frames: Vec<RelayMessage> },
    /// A REQ refused before it ran: its reserved slot is released, its CLOSED sent.
    SubRefused { sub_id: String, generation: u64, closed: RelayMessage },
    /// A checked AUTH: on success the connection is bound to the pubkey.
    Auth { id: String, result: Result<PubKey, String> },
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
    let ip = info.client_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let mut reg = app.fanout.register(app.config.server.max_outbound_queue, Principal::Ip(ip));
    let span = tracing::info_span!("conn", peer = ?info.peer, conn_id = reg.id);
    async move {
        tracing::debug!("connected");
        metrics::gauge!("hearth_connections_open").increment(1.0);
        run(&app, ws, &mut reg, info).await;
        metrics::gauge!("hearth_connections_open").decrement(1.0);
        tracing::debug!("disconnected");
    }
    .instrument(span)
    .await
}

async fn run(app: &Arc<AppState>, ws: WebSocket, reg: &mut Registration, info: ConnInfo) {
    let (mut sink, mut stream) = ws.split();
    let mut session = Session::new(info.client_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), challenge());
    let relay_match = match app.config.server.public_url.as_str() {
        "" => info.host.clone().map(RelayMatch::Host),
        url => Some(RelayMatch::Url(url.to_string())),
    };
    if !send(&mut sink, &RelayMessage::Auth(session.challenge.clone())).await {
        return;
    }
    let mut in_flight: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    let max_in_flight = app.config.server.max_in_flight;
    loop {
        tokio::select! {
            biased;
            _ = app.shutdown.cancelled() => break,
            _ = reg.slow.cancelled() => break,
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                // Every result that is ready goes out in one write: a group commit finishes
                // many EVENTs at once, and one syscall per OK would cost more than the OK.
                let batch = async {
                    let mut more = Some(done);
                    while let Some(done) = more.take() {
                        if !deliver(&mut sink, &mut session, app, reg.id, done).await {
                            return false;
                        }
                        more = in_flight.next().now_or_never().flatten();
                    }
                    sink.flush().await.is_ok()
                };
                if !guarded(batch, &reg.slow, &app.shutdown).await {
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
                let action = match &msg {
                    Message::Close(_) => break,
                    Message::Text(text) => handle(app, &mut session, reg.id, text.as_str(), relay_match.as_ref()),
                    Message::Binary(_) => {
                        Action::Reply(RelayMessage::Notice("invalid: binary frames are not supported; send text".into()))
                    }
                    // Pings are answered by tungstenite itself.
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Action::Nothing,
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
            let write =
                async { deliver(&mut sink, &mut session, app, reg.id, done).await && sink.flush().await.is_ok() };
            writable = tokio::time::timeout_at(deadline, write).await.unwrap_or(false);
        }
    }
    // The registration's drop removes every subscription of the connection.
    if writable {
        let _ = tokio::time::timeout(FINAL_WRITE, sink.send(Message::Close(None))).await;
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

/// Queues the frames of one finished piece of work; the caller flushes.
async fn deliver(sink: &mut Sink, session: &mut Session, app: &AppState, conn: ConnId, done: Done) -> bool {
    let frames = match done {
        Done::Frames(frames) => frames,
        Done::Query { sub_id, generation, frames } => {
            if !session.is_current(&sub_id, generation) {
                // Closed or replaced while it ran: drop its results and its live registration.
                app.fanout.unsubscribe(conn, &sub_id, Some(generation));
                return true;
            }
            frames
        }
        Done::SubRefused { sub_id, generation, closed } => {
            if session.is_current(&sub_id, generation) {
                session.close(&sub_id);
            }
            vec![closed]
        }
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
        if sink.feed(Message::text(frame.to_json())).await.is_err() {
            return false;
        }
    }
    true
}

/// A fresh NIP-42 challenge: 16 random bytes as hex.
fn challenge() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to the clock; a challenge only needs to be unpredictable
        // enough that an AUTH event cannot be prepared in advance.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos());
        bytes = nanos.unwrap_or(0).to_le_bytes();
    }
    hex::encode(bytes)
}

fn refused_closed(sub_id: String, refused: &Refused) -> RelayMessage {
    Correlation::Subscription(sub_id).refuse(refused.message())
}

/// What a refusal of `text` can be tied to, parsing it as far as it goes.
fn correlate(text: &str) -> Correlation {
    match ClientMessage::parse(text) {
        Ok(msg) => msg.correlation(),
        Err(e) => e.correlation(),
    }
}

const AUTH_REQUIRED: &str = "auth-required: this relay requires authentication; answer the AUTH challenge";

fn handle(
    app: &Arc<AppState>,
    session: &mut Session,
    conn: ConnId,
    text: &str,
    relay_match: Option<&RelayMatch>,
) -> Action {
    let lim = &app.config.limitation;
    let principal = session.principal();
    if text.len() > lim.max_message_length {
        // Oversized and unparseable frames are billed like any frame, so they are never free.
        let message = match app.limiter.admit(&principal, LimitType::WsEvents) {
            Ok(()) => format!("invalid: message is {} bytes, the limit is {}", text.len(), lim.max_message_length),
            Err(refused) => refused.message(),
        };
        return Action::Reply(correlate(text).refuse(message));
    }
    let msg = match ClientMessage::parse(text) {
        Ok(msg) => msg,
        Err(e) => {
            tracing::debug!(error = %e, "unparseable frame");
            return Action::Reply(match app.limiter.admit(&principal, LimitType::WsEvents) {
                Ok(()) => e.reply(),
                Err(refused) => e.correlation().refuse(refused.message()),
            });
        }
    };
    metrics::counter!("hearth_frames_total").increment(1);
    // CLOSE and AUTH are never billed or refused: a client can always close and authenticate.
    // Everything else is billed on arrival, before any costly work.
    let admitted = match &msg {
        ClientMessage::Close(_) | ClientMessage::Auth(_) => Ok(()),
        _ => app.limiter.admit(&principal, LimitType::WsEvents),
    };
    let needs_auth = app.config.auth.required && session.authed.is_none();
    match msg {
        ClientMessage::Event(event) => {
            metrics::counter!("hearth_events_received_total").increment(1);
            let id = event.id.to_hex();
            if let Err(refused) = admitted {
                return Action::Reply(Correlation::Event(id).refuse(refused.message()));
            }
            if needs_auth {
                return Action::Reply(RelayMessage::ok(id, false, AUTH_REQUIRED));
            }
            let app = app.clone();
            let publisher = Publisher { authed: session.authed, principal };
            Action::Spawn(Box::pin(async move {
                let outcome = ingest::publish(&app, *event, publisher).await;
                Done::Frames(vec![RelayMessage::ok(id, outcome.accepted(), outcome.message())])
            }))
        }
        ClientMessage::Req { sub_id, mut filters } => {
            if let Err(closed) = check_request(admitted, needs_auth, lim, &sub_id, &mut filters) {
                return Action::Reply(closed);
            }
            let generation = match session.open(&sub_id, lim.max_subscriptions) {
                Ok(g) => g,
                Err(reason) => {
                    return Action::Reply(RelayMessage::Closed { sub_id, message: format!("error: {reason}") });
                }
            };
            Action::Spawn(Box::pin(query(app.clone(), principal, conn, sub_id, generation, filters)))
        }
        ClientMessage::Count { sub_id, mut filters } => {
            if let Err(closed) = check_request(admitted, needs_auth, lim, &sub_id, &mut filters) {
                return Action::Reply(closed);
            }
            Action::Spawn(Box::pin(count(app.clone(), principal, sub_id, filters)))
        }
        ClientMessage::Close(sub_id) => {
            session.close(&sub_id);
            app.fanout.unsubscribe(conn, &sub_id, None);
            Action::Nothing
        }
        ClientMessage::Auth(event) => {
            let challenge = session.challenge.clone();
            let relay_match = relay_match.cloned();
            Action::Spawn(Box::pin(authenticate(*event, challenge, relay_match)))
        }
    }
}

/// The checks a REQ and a COUNT share, in order: admission, authentication, limits (which also
/// default and clamp each filter's `limit`). `Err` is the CLOSED that answers the frame.
fn check_request(
    admitted: Result<(), Refused>,
    needs_auth: bool,
    lim: &crate::config::Limitation,
    sub_id: &str,
    filters: &mut [Filter],
) -> Result<(), RelayMessage> {
    let closed = |message: String| RelayMessage::Closed { sub_id: sub_id.to_string(), message };
    admitted.map_err(|refused| closed(refused.message()))?;
    if needs_auth {
        return Err(closed(AUTH_REQUIRED.into()));
    }
    prepare_filters(lim, sub_id, filters).map_err(|reason| closed(format!("error: {reason}")))
}

/// Checks a NIP-42 answer: signature, kind, challenge, relay, time.
async fn authenticate(event: Event, challenge: String, relay_match: Option<RelayMatch>) -> Done {
    let id = event.id.to_hex();
    // On the connection's own task, like every signature check (see `ingest`).
    let result = match verify(event) {
        Err(e) => Err(format!("invalid: {e}")),
        Ok(verified) => {
            // Without a public_url or a Host header there is nothing to compare the relay tag to.
            let relay_match = relay_match.unwrap_or_else(|| {
                RelayMatch::Host(verified.tag_values("relay").next().and_then(nip42::host_of).unwrap_or_default())
            });
            nip42::check(&verified, &challenge, &relay_match, Timestamp::now())
                .map(|()| verified.pubkey)
                .map_err(|e| e.to_string())
        }
    };
    Done::Auth { id, result }
}

async fn query(
    app: Arc<AppState>,
    principal: Principal,
    conn: ConnId,
    sub_id: String,
    generation: u64,
    filters: Vec<Filter>,
) -> Done {
    let _permit = match app.limiter.acquire_handler(&principal).await {
        Ok(permit) => permit,
        Err(refused) => {
            return Done::SubRefused { closed: refused_closed(sub_id.clone(), &refused), sub_id, generation };
        }
    };
    app.fanout.subscribe(conn, &sub_id, generation, filters.clone());
    let frames = match app.store.query_async(filters, Timestamp::now()).await {
        Ok(events) => {
            let mut frames: Vec<RelayMessage> =
                events.into_iter().map(|event| RelayMessage::Event { sub_id: sub_id.clone(), event }).collect();
            frames.push(RelayMessage::Eose(sub_id.clone()));
            frames
        }
        Err(e) => {
            tracing::error!(error = %e, "query failed");
            app.fanout.unsubscribe(conn, &sub_id, Some(generation));
            let closed = RelayMessage::Closed { sub_id: sub_id.clone(), message: "error: the query failed".into() };
            return Done::SubRefused { sub_id, generation, closed };
        }
    };
    Done::Query { sub_id, generation, frames }
}

async fn count(app: Arc<AppState>, principal: Principal, sub_id: String, filters: Vec<Filter>) -> Done {
    let _permit = match app.limiter.acquire_handler(&principal).await {
        Ok(permit) => permit,
        Err(refused) => return Done::Frames(vec![refused_closed(sub_id, &refused)]),
    };
    let frame = match app.store.count_async(filters, Timestamp::now()).await {
        Ok(count) => RelayMessage::Count { sub_id, count },
        Err(e) => {
            tracing::error!(error = %e, "count failed");
            RelayMessage::Closed { sub_id, message: "error: the count failed".into() }
        }
    };
    Done::Frames(vec![frame])
}
