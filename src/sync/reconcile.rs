//! The initiator's side of NIP-77: a negentropy exchange with a peer relay over its WebSocket.
//!
//! Owns one exchange: `NEG-OPEN` with our item set's first message, then `NEG-MSG` back and forth
//! until the `negentropy` crate says the sets are reconciled, then `NEG-CLOSE`. What it finds is
//! the ids we have and the peer lacks, and the ids the peer has and we lack, and the bytes the
//! messages cost. A `NEG-ERR` `rate-limited: …; retry in Ns` is waited out and the exchange
//! started once more; `auth-required:` is answered with a NIP-42 AUTH by `keys` (the relay's
//! own) and the exchange started once more.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use negentropy::{Id, Negentropy, NegentropyStorageVector};
use tokio_tungstenite::tungstenite::Message;

use crate::client::core::retry_hint;
use crate::client::ws::socket_config;
use crate::protocol::{ClientMessage, EventId, Filter, Keys, Timestamp};
use crate::store::Item;

/// How long connecting to the peer may take.
pub const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// How long one answer of the peer may take.
const ANSWER_WAIT: Duration = Duration::from_secs(120);
/// The longest wait a `retry in Ns` hint is taken for.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);
/// The sync session's id on the peer.
const SUB_ID: &str = "hearth-sync";

/// Why an exchange did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The peer could not be reached or broke the protocol.
    #[error("{0}")]
    Peer(String),
    /// The peer refused (`NEG-ERR`, or an AUTH answered `OK false`), with its reason.
    #[error("the peer refused: {0}")]
    Refused(String),
}

/// What an exchange found.
#[derive(Clone, Debug, Default)]
pub struct Reconciled {
    /// Ids we have and the peer lacks.
    pub have: Vec<EventId>,
    /// Ids the peer has and we lack.
    pub need: Vec<EventId>,
    /// Bytes of the frames sent and received (their JSON text).
    pub bytes: u64,
    /// Messages the peer answered.
    pub rounds: u32,
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reconciles `items` (sorted or not) for `filter` with the peer at `url`.
pub async fn reconcile(
    url: &str,
    filter: &Filter,
    items: &[Item],
    frame_size_limit: u64,
    keys: Option<&Keys>,
) -> Result<Reconciled, ExchangeError> {
    let mut storage = NegentropyStorageVector::with_capacity(items.len());
    for (at, id) in items {
        storage.insert(at.0, Id::from_byte_array(id.0)).map_err(neg)?;
    }
    storage.seal().map_err(neg)?;
    let connect = tokio_tungstenite::connect_async_with_config(url, Some(socket_config()), true);
    let (mut ws, _) = tokio::time::timeout(CONNECT_WAIT, connect)
        .await
        .map_err(|_| {
            ExchangeError::Peer(format!("cannot connect to {url}: no answer within {} seconds", CONNECT_WAIT.as_secs()))
        })?
        .map_err(|e| ExchangeError::Peer(format!("cannot connect to {url}: {e}")))?;
    let mut challenge = None;
    let mut retried = false;
    loop {
        match exchange(&mut ws, &storage, filter, frame_size_limit, &mut challenge).await {
            Err(ExchangeError::Refused(reason)) if !retried => {
                retried = true;
                if let Some(wait) = retry_hint(&reason).filter(|_| reason.starts_with("rate-limited:")) {
                    tokio::time::sleep(wait.min(MAX_RETRY_WAIT)).await;
                } else if let (true, Some(keys), Some(c)) = (reason.starts_with("auth-required:"), keys, &challenge) {
                    authenticate(&mut ws, url, keys, c).await?;
                } else {
                    return Err(ExchangeError::Refused(reason));
                }
            }
            done => {
                let _ = ws.close(None).await;
                return done;
            }
        }
    }
}

/// One exchange from NEG-OPEN to NEG-CLOSE.
async fn exchange(
    ws: &mut Ws,
    storage: &NegentropyStorageVector,
    filter: &Filter,
    frame_size_limit: u64,
    challenge: &mut Option<String>,
) -> Result<Reconciled, ExchangeError> {
    let mut negentropy = Negentropy::borrowed(storage, frame_size_limit).map_err(neg)?;
    let first = negentropy.initiate().map_err(neg)?;
    let mut out = Reconciled::default();
    let open = ClientMessage::NegOpen { sub_id: SUB_ID.into(), filter: Box::new(filter.clone()), message: first };
    send(ws, &open, &mut out).await?;
    loop {
        let answer = next_answer(ws, &mut out, challenge).await?;
        out.rounds += 1;
        let (mut have, mut need) = (Vec::new(), Vec::new());
        let next = negentropy.reconcile_with_ids(&answer, &mut have, &mut need).map_err(neg)?;
        out.have.extend(have.into_iter().map(|id| EventId(id.to_bytes())));
        out.need.extend(need.into_iter().map(|id| EventId(id.to_bytes())));
        match next {
            Some(message) => send(ws, &ClientMessage::NegMsg { sub_id: SUB_ID.into(), message }, &mut out).await?,
            None => {
                send(ws, &ClientMessage::NegClose(SUB_ID.into()), &mut out).await?;
                // A range answered across several messages (frame_size_limit) can name an id
                // more than once.
                for ids in [&mut out.have, &mut out.need] {
                    ids.sort_unstable();
                    ids.dedup();
                }
                return Ok(out);
            }
        }
    }
}

/// The peer's next NEG-MSG of our session (AUTH challenges kept, other frames skipped).
async fn next_answer(
    ws: &mut Ws,
    out: &mut Reconciled,
    challenge: &mut Option<String>,
) -> Result<Vec<u8>, ExchangeError> {
    loop {
        let frame = tokio::time::timeout(ANSWER_WAIT, ws.next())
            .await
            .map_err(|_| ExchangeError::Peer(format!("no answer within {} seconds", ANSWER_WAIT.as_secs())))?;
        let text = match frame {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | None => {
                return Err(ExchangeError::Peer("the peer closed the connection".into()));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(ExchangeError::Peer(format!("reading from the peer failed: {e}"))),
        };
        out.bytes += text.len() as u64;
        let frame: Vec<serde_json::Value> = match serde_json::from_str(text.as_str()) {
            Ok(frame) => frame,
            Err(_) => continue,
        };
        let (verb, sub) = (frame.first().and_then(|v| v.as_str()), frame.get(1).and_then(|v| v.as_str()));
        match (verb, sub) {
            (Some("AUTH"), Some(c)) => *challenge = Some(c.to_string()),
            (Some("NEG-MSG"), Some(SUB_ID)) => {
                let hex_text = frame.get(2).and_then(|v| v.as_str()).unwrap_or_default();
                return hex::decode(hex_text)
                    .map_err(|e| ExchangeError::Peer(format!("a NEG-MSG that is not hex: {e}")));
            }
            (Some("NEG-ERR"), Some(SUB_ID)) => {
                let reason = frame.get(2).and_then(|v| v.as_str()).unwrap_or_default();
                return Err(ExchangeError::Refused(reason.to_string()));
            }
            (Some("NOTICE"), _) => {
                tracing::info!(notice = %frame.get(1).map(|v| v.to_string()).unwrap_or_default(), "the sync peer says");
            }
            _ => {}
        }
    }
}

/// Answers the peer's NIP-42 challenge with `keys` and waits for its OK.
async fn authenticate(ws: &mut Ws, url: &str, keys: &Keys, challenge: &str) -> Result<(), ExchangeError> {
    let event = crate::protocol::nip42::answer(keys, url, challenge, Timestamp::now());
    let id = event.id.to_hex();
    let mut ignored = Reconciled::default();
    send(ws, &ClientMessage::Auth(Box::new(event)), &mut ignored).await?;
    loop {
        let frame = tokio::time::timeout(ANSWER_WAIT, ws.next())
            .await
            .map_err(|_| ExchangeError::Peer("no OK to AUTH".into()))?;
        let Some(Ok(Message::Text(text))) = frame else {
            return Err(ExchangeError::Peer("the peer closed the connection".into()));
        };
        let frame: Vec<serde_json::Value> = serde_json::from_str(text.as_str()).unwrap_or_default();
        if frame.first().and_then(|v| v.as_str()) == Some("OK") && frame.get(1).and_then(|v| v.as_str()) == Some(&id) {
            return match frame.get(2).and_then(|v| v.as_bool()) {
                Some(true) => Ok(()),
                _ => Err(ExchangeError::Refused(frame.get(3).and_then(|v| v.as_str()).unwrap_or_default().to_string())),
            };
        }
    }
}

/// Sends one frame, counting its bytes.
async fn send(ws: &mut Ws, frame: &ClientMessage, out: &mut Reconciled) -> Result<(), ExchangeError> {
    let text = serde_json::to_string(frame).map_err(|e| ExchangeError::Peer(e.to_string()))?;
    out.bytes += text.len() as u64;
    ws.send(Message::text(text)).await.map_err(|e| ExchangeError::Peer(format!("writing to the peer failed: {e}")))
}

/// A negentropy failure: the peer's message could not be read, or our side could not be built.
fn neg(e: negentropy::Error) -> ExchangeError {
    ExchangeError::Peer(format!("negentropy: {e}"))
}
