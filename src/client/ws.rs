//! The WebSocket session's task: frames between the socket and the [`Core`], and the caller's
//! [`Session`] over it.
//!
//! Owns connecting (the pace read from the relay's NIP-11 unless given, the hold for a NIP-42
//! challenge when the session has keys) and the loop that moves frames both ways; the rules are
//! the core's, the waiters the session's.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::core::{Core, Pace, Progress, Transport};
use super::nip11::{http_base, nip11};
use super::session::{Command, Options, Session, Waiters, sleep_until};
use crate::protocol::{Keys, Tier};

/// Bytes read from the socket at once: tungstenite's default of 128 KiB is zero-filled on every
/// read, which costs more than the frames of a relay session.
const READ_BUFFER: usize = 8 * 1024;

/// The client side's socket configuration (the bench uses it too).
pub fn socket_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(READ_BUFFER)
}

/// How long a session with keys holds its first requests for the relay's NIP-42 challenge and the
/// answer to its AUTH, so that they are billed to the key and not to the address. hearth sends
/// the challenge as its first frame; a relay that sends none costs this wait once.
const AUTH_HOLD: Duration = Duration::from_secs(2);

impl Session {
    /// Connects to `relay_url`; `keys` answer NIP-42 challenges.
    pub async fn connect(relay_url: &str, keys: Option<Keys>, options: Options) -> Result<Session, String> {
        // A fixed pace is for every frame; the relay's own document may bill reads apart.
        let (pace, read_pace) = match options.pace {
            Some(p) => (Some(p), None),
            None => match nip11(&reqwest::Client::new(), &http_base(relay_url)).await.ok().flatten() {
                Some(doc) => (
                    Pace::advertised(&doc, Tier::Human, Transport::WebSocket),
                    Pace::advertised(&doc, Tier::Human, Transport::WebSocketReads),
                ),
                None => (None, None),
            },
        };
        let (ws, _) = tokio_tungstenite::connect_async_with_config(relay_url, Some(socket_config()), true)
            .await
            .map_err(|e| format!("cannot connect to {relay_url}: {e}"))?;
        let with_keys = keys.is_some();
        let mut core = Core::new(relay_url, keys, options.publish_timeout, pace);
        if let Some(read_pace) = read_pace {
            core.set_read_pace(read_pace);
        }
        if with_keys {
            core.hold_for_auth(Instant::now() + AUTH_HOLD);
        }
        let (session, rx, progress) = Session::channels(None);
        tokio::spawn(drive(ws, core, rx, progress));
        Ok(session)
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
