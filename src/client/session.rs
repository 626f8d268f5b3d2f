//! An async relay session: one WebSocket, driven by [`super::core::Core`].
//!
//! Owns the socket task. Callers publish, subscribe and count through a bounded command channel;
//! every decision (gate, resend, pacing, AUTH) is the core's.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::core::{Core, Pace, PublishError, Update};
use crate::protocol::{Event, EventId, Filter, Keys};

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
    /// How long a publish may take, waits for the gate included.
    pub publish_timeout: Duration,
    /// Outbound pace; `None` = read it from the relay's NIP-11 document (no pacing if absent).
    pub pace: Option<Pace>,
}

impl Default for Options {
    fn default() -> Self {
        Options { publish_timeout: Duration::from_secs(60), pace: None }
    }
}

enum Command {
    Publish(Box<Event>, oneshot::Sender<Result<String, PublishError>>),
    Req(String, Vec<Filter>, mpsc::Sender<Update>),
    Count(String, Vec<Filter>, oneshot::Sender<Result<u64, String>>),
    Close(String),
}

/// A connection to one relay.
pub struct Session {
    commands: mpsc::Sender<Command>,
    next_sub: std::sync::atomic::AtomicU64,
}

/// Share of the advertised rate the client paces at.
const PACE_MARGIN: f64 = 0.9;

/// The relay's advertised pace: `hearth_limits.human` from NIP-11, if it has one.
pub async fn advertised_pace(relay_url: &str) -> Option<Pace> {
    let http_url = relay_url.replacen("wss://", "https://", 1).replacen("ws://", "http://", 1);
    let doc: Value = reqwest::Client::new()
        .get(http_url)
        .header("Accept", "application/nostr+json")
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let tier = &doc["hearth_limits"]["human"];
    let per_sec = tier["ws_events_per_sec"].as_f64()?;
    let window = tier["ws_burst_window_secs"].as_f64().unwrap_or(1.0);
    // A little under the limit: frames bunched by the network must not arrive faster than the
    // relay admits them once the burst is spent.
    Some(Pace { per_sec: per_sec * PACE_MARGIN, burst: (per_sec * window - 1.0).max(1.0) })
}

impl Session {
    /// Connects to `relay_url`; `keys` answer NIP-42 challenges.
    pub async fn connect(relay_url: &str, keys: Option<Keys>, options: Options) -> Result<Session, String> {
        let pace = match options.pace {
            Some(p) => Some(p),
            None => advertised_pace(relay_url).await,
        };
        let (ws, _) = tokio_tungstenite::connect_async_with_config(relay_url, Some(socket_config()), true)
            .await
            .map_err(|e| format!("cannot connect to {relay_url}: {e}"))?;
        let core = Core::new(relay_url, keys, options.publish_timeout, pace);
        let (commands, rx) = mpsc::channel(1024);
        tokio::spawn(drive(ws, core, rx));
        Ok(Session { commands, next_sub: std::sync::atomic::AtomicU64::new(0) })
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

async fn drive(ws: Ws, mut core: Core, mut commands: mpsc::Receiver<Command>) {
    let (mut sink, mut stream) = ws.split();
    let mut publishes: HashMap<EventId, oneshot::Sender<Result<String, PublishError>>> = HashMap::new();
    let mut subs: HashMap<String, mpsc::Sender<Update>> = HashMap::new();
    let mut counts: HashMap<String, oneshot::Sender<Result<u64, String>>> = HashMap::new();
    let mut open = true;
    let mut connected = true;
    while open {
        let now = Instant::now();
        while let Some(text) = core.poll_transmit(now) {
            if !connected || sink.send(Message::text(text)).await.is_err() {
                connected = false;
                core.on_disconnect("connection reset");
                break;
            }
        }
        while let Some(update) = core.poll_update() {
            match update {
                Update::Published(id, result) => {
                    if let Some(tx) = publishes.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Update::Count(sub, n) => {
                    if let Some(tx) = counts.remove(&sub) {
                        let _ = tx.send(Ok(n));
                    }
                }
                Update::Closed(sub, why) => {
                    if let Some(tx) = counts.remove(&sub) {
                        let _ = tx.send(Err(why));
                    } else if let Some(tx) = subs.remove(&sub) {
                        let _ = tx.send(Update::Closed(sub, why)).await;
                    }
                }
                Update::Event(ref sub, _) | Update::Eose(ref sub) => {
                    if let Some(tx) = subs.get(sub) {
                        let _ = tx.send(update.clone()).await;
                    }
                }
                Update::Notice(_) => {}
            }
        }
        if !connected {
            // Dropping the senders tells every waiting subscriber and COUNT the connection is gone.
            subs.clear();
            counts.clear();
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
            command = commands.recv() => match command {
                Some(Command::Publish(event, tx)) => {
                    publishes.insert(event.id, tx);
                    core.publish(*event, Instant::now());
                }
                Some(Command::Req(sub, filters, tx)) => {
                    subs.insert(sub.clone(), tx);
                    core.req(&sub, filters);
                }
                Some(Command::Count(sub, filters, tx)) => {
                    counts.insert(sub.clone(), tx);
                    core.count(&sub, filters);
                }
                Some(Command::Close(sub)) => {
                    subs.remove(&sub);
                    core.close(&sub);
                }
                None => {
                    // The session was closed: nothing waits for answers, so nothing is resent.
                    core.on_disconnect("session closed");
                    open = false;
                }
            },
            _ = sleep_until(wake) => core.on_tick(Instant::now()),
        }
    }
    let _ = sink.send(Message::Close(None)).await;
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}
