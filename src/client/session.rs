//! An async relay session, driven by [`super::core::Core`]: the caller's handle for both
//! transports, and the WebSocket's task.
//!
//! Owns the socket task and what both transports' tasks share: the commands callers send through
//! a bounded channel, and who waits for the answers (`Waiters`). Every decision (gate, resend,
//! pacing, AUTH) is the core's; the REST task is [`super::rest`]'s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::core::{Core, Pace, Progress, PublishError, Transport, Update};
use super::rest;

use crate::protocol::{Event, EventId, Filter, Keys, Tier};

/// Bytes read from the socket at once: tungstenite's default of 128 KiB is zero-filled on every
/// read, which costs more than the frames of a relay session.
const READ_BUFFER: usize = 8 * 1024;

/// The client side's socket configuration (the bench uses it too).
pub fn socket_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(READ_BUFFER)
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long a publish may take from when it is first sent, waits for the gate included
    /// (time queued behind the client's own pacing does not count).
    pub publish_timeout: Duration,
    /// Outbound pace; `None` = read it from the relay's NIP-11 document (no pacing if absent).
    pub pace: Option<Pace>,
}

impl Default for Options {
    fn default() -> Self {
        Options { publish_timeout: Duration::from_secs(60), pace: None }
    }
}

/// What a caller asks of its session's task, over either transport.
pub(super) enum Command {
    Publish(Box<Event>, oneshot::Sender<Result<String, PublishError>>),
    Req(String, Vec<Filter>, mpsc::Sender<Update>),
    Count(String, Vec<Filter>, oneshot::Sender<Result<u64, String>>),
    Close(String),
}

/// A session with one relay, over a WebSocket ([`Session::connect`]) or its REST API
/// ([`Session::connect_rest`]: a subscription there ends at EOSE, with no live events).
pub struct Session {
    commands: mpsc::Sender<Command>,
    next_sub: std::sync::atomic::AtomicU64,
    progress: watch::Receiver<Progress>,
    /// The caller's tier as the relay names it (REST answers only).
    tier: Option<watch::Receiver<Option<Tier>>>,
}

/// How long a session with keys holds its first requests for the relay's NIP-42 challenge and the
/// answer to its AUTH, so that they are billed to the key and not to the address. hearth sends
/// the challenge as its first frame; a relay that sends none costs this wait once.
const AUTH_HOLD: Duration = Duration::from_secs(2);

impl Session {
    /// Connects to `relay_url`; `keys` answer NIP-42 challenges.
    pub async fn connect(relay_url: &str, keys: Option<Keys>, options: Options) -> Result<Session, String> {
        let pace = match options.pace {
            Some(p) => Some(p),
            None => rest::nip11(&reqwest::Client::new(), &rest::http_base(relay_url))
                .await
                .ok()
                .flatten()
                .and_then(|doc| Pace::advertised(&doc, Tier::Human, Transport::WebSocket)),
        };
        let (ws, _) = tokio_tungstenite::connect_async_with_config(relay_url, Some(socket_config()), true)
            .await
            .map_err(|e| format!("cannot connect to {relay_url}: {e}"))?;
        let with_keys = keys.is_some();
        let mut core = Core::new(relay_url, keys, options.publish_timeout, pace);
        if with_keys {
            core.hold_for_auth(Instant::now() + AUTH_HOLD);
        }
        let (session, rx, progress) = Session::channels(None);
        tokio::spawn(drive(ws, core, rx, progress));
        Ok(session)
    }

    /// A session with the relay at `relay_url` (`ws(s)://` or `http(s)://`) over its REST API;
    /// `keys` sign every call (NIP-98), so it is billed to the key.
    pub async fn connect_rest(relay_url: &str, keys: Option<Keys>, options: Options) -> Result<Session, String> {
        rest::start(relay_url, keys, options).await
    }

    /// A session and the ends its task keeps: the commands, and where it says its progress.
    pub(super) fn channels(
        tier: Option<watch::Receiver<Option<Tier>>>,
    ) -> (Session, mpsc::Receiver<Command>, watch::Sender<Progress>) {
        let (commands, rx) = mpsc::channel(1024);
        let (progress_tx, progress) = watch::channel(Progress::default());
        let session = Session { commands, next_sub: std::sync::atomic::AtomicU64::new(0), progress, tier };
        (session, rx, progress_tx)
    }

    /// What the session has done so far.
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// The caller's tier, as the relay last named it (over REST, once it has answered).
    pub fn tier(&self) -> Option<Tier> {
        self.tier.as_ref().and_then(|t| *t.borrow())
    }

    /// Publishes an event: `Ok("")`, `Ok("duplicate: …")`, or why not.
    pub async fn publish(&self, event: Event) -> Result<String, PublishError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Publish(Box::new(event), tx))
            .await
            .map_err(|_| PublishError::Disconnected("session closed".into()))?;
        rx.await.map_err(|_| PublishError::Disconnected("session closed".into()))?
    }

    fn sub_id(&self) -> String {
        format!("h{}", self.next_sub.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// Opens a subscription; updates (events, EOSE, CLOSED) arrive on the receiver.
    pub async fn subscribe(&self, filters: Vec<Filter>) -> Result<(String, mpsc::Receiver<Update>), String> {
        let sub = self.sub_id();
        let (tx, rx) = mpsc::channel(1024);
        self.commands.send(Command::Req(sub.clone(), filters, tx)).await.map_err(|_| "session closed".to_string())?;
        Ok((sub, rx))
    }

    /// Stored events matching `filters`, up to EOSE; the subscription is then closed.
    pub async fn fetch(&self, filters: Vec<Filter>) -> Result<Vec<Value>, String> {
        let (sub, mut rx) = self.subscribe(filters).await?;
        let mut events = Vec::new();
        loop {
            match rx.recv().await {
                Some(Update::Event(_, e)) => events.push(e),
                Some(Update::Eose(_)) => break,
                Some(Update::Closed(_, why)) => return Err(why),
                Some(_) => {}
                None => return Err("connection lost".into()),
            }
        }
        self.close(&sub).await;
        Ok(events)
    }

    /// Closes a subscription.
    pub async fn close(&self, sub: &str) {
        let _ = self.commands.send(Command::Close(sub.to_string())).await;
    }

    /// NIP-45 COUNT.
    pub async fn count(&self, filters: Vec<Filter>) -> Result<u64, String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Count(self.sub_id(), filters, tx))
            .await
            .map_err(|_| "session closed".to_string())?;
        rx.await.map_err(|_| "connection lost".to_string())?
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn drive(ws: Ws, mut core: Core, mut commands: mpsc::Receiver<Command>, progress: watch::Sender<Progress>) {
    let (mut sink, mut stream) = ws.split();
    let mut waiters = Waiters::default();
    let mut open = true;
    let mut connected = true;
    while open {
        let now = Instant::now();
        while let Some(message) = core.poll_transmit(now) {
            let Ok(text) = serde_json::to_string(&message) else { continue };
            if !connected || sink.send(Message::text(text)).await.is_err() {
                connected = false;
                core.on_disconnect("connection reset");
                break;
            }
        }
        waiters.deliver(&mut core, &progress).await;
        if !connected {
            waiters.lost();
        }
        let wake = core.next_wakeup(Instant::now());
        tokio::select! {
            frame = stream.next(), if connected => match frame {
                Some(Ok(Message::Text(text))) => core.on_frame(text.as_str(), Instant::now()),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    connected = false;
                    core.on_disconnect(&e.to_string());
                }
                None => {
                    connected = false;
                    core.on_disconnect("connection closed by the relay");
                }
            },
            command = commands.recv() => open = waiters.command(&mut core, command),
            _ = sleep_until(wake) => core.on_tick(Instant::now()),
        }
    }
    let _ = sink.send(Message::Close(None)).await;
}

/// Who waits for what the core answers: the same for both transports' tasks.
#[derive(Default)]
pub(super) struct Waiters {
    publishes: HashMap<EventId, oneshot::Sender<Result<String, PublishError>>>,
    subs: HashMap<String, mpsc::Sender<Update>>,
    counts: HashMap<String, oneshot::Sender<Result<u64, String>>>,
}

impl Waiters {
    /// Takes a caller's command into the core; false once the session was dropped (`None`):
    /// nothing waits for answers then, so nothing is resent.
    pub(super) fn command(&mut self, core: &mut Core, command: Option<Command>) -> bool {
        match command {
            Some(Command::Publish(event, tx)) => {
                self.publishes.insert(event.id, tx);
                core.publish(*event);
            }
            Some(Command::Req(sub, filters, tx)) => {
                self.subs.insert(sub.clone(), tx);
                core.req(&sub, filters);
            }
            Some(Command::Count(sub, filters, tx)) => {
                self.counts.insert(sub.clone(), tx);
                core.count(&sub, filters);
            }
            Some(Command::Close(sub)) => {
                self.subs.remove(&sub);
                core.close(&sub);
            }
            None => {
                core.on_disconnect("session closed");
                return false;
            }
        }
        true
    }

    /// Hands the core's updates to whoever waits for them. The progress goes first: whoever
    /// reads a result then sees progress that counts it.
    pub(super) async fn deliver(&mut self, core: &mut Core, progress: &watch::Sender<Progress>) {
        progress.send_replace(core.progress());
        while let Some(update) = core.poll_update() {
            match update {
                Update::Published(id, result) => {
                    if let Some(tx) = self.publishes.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Update::Count(sub, n) => {
                    if let Some(tx) = self.counts.remove(&sub) {
                        let _ = tx.send(Ok(n));
                    }
                }
                Update::Closed(sub, why) => {
                    if let Some(tx) = self.counts.remove(&sub) {
                        let _ = tx.send(Err(why));
                    } else if let Some(tx) = self.subs.remove(&sub) {
                        let _ = tx.send(Update::Closed(sub, why)).await;
                    }
                }
                Update::Event(ref sub, _) | Update::Eose(ref sub) => {
                    if let Some(tx) = self.subs.get(sub) {
                        let _ = tx.send(update.clone()).await;
                    }
                }
                Update::Notice(_) => {}
            }
        }
    }

    /// The relay is gone: dropping the senders tells every waiting subscriber and COUNT.
    pub(super) fn lost(&mut self) {
        self.subs.clear();
        self.counts.clear();
    }
}

/// Until the core's next wake-up, or for ever when it needs none.
pub(super) async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}
