//! Wire messages: client → relay frames parsed into [`ClientMessage`] (relay → client frames
//! are [`RelayMessage`]'s, in `relay_message.rs`).
//!
//! Owns the frame grammar and the one place a parse failure is mapped to the frame that can be
//! correlated with it ([`ParseError::reply`]): a bad EVENT gets its `OK`, a bad REQ/COUNT its
//! `CLOSED`, and only what cannot be tied to an id gets a `NOTICE`.

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use super::event::{Event, EventError};
use super::filter::Filter;
pub use super::relay_message::RelayMessage;

/// A parsed client frame.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientMessage {
    /// `["EVENT", <event>]`
    Event(Box<Event>),
    /// `["REQ", <sub id>, <filter>…]`
    Req {
        /// Subscription id.
        sub_id: String,
        /// One or more filters, OR'ed.
        filters: Vec<Filter>,
    },
    /// `["COUNT", <query id>, <filter>…]` (NIP-45)
    Count {
        /// Query id.
        sub_id: String,
        /// One or more filters, OR'ed.
        filters: Vec<Filter>,
    },
    /// `["CLOSE", <sub id>]`
    Close(String),
    /// `["AUTH", <kind-22242 event>]` (NIP-42)
    Auth(Box<Event>),
    /// `["NEG-OPEN", <sub id>, <filter>, <initial message, hex>]` (NIP-77)
    NegOpen {
        /// The sync session's id.
        sub_id: String,
        /// The one filter whose events are reconciled.
        filter: Box<Filter>,
        /// The initiator's first negentropy message, decoded from hex.
        message: Vec<u8>,
    },
    /// `["NEG-MSG", <sub id>, <message, hex>]` (NIP-77)
    NegMsg {
        /// The sync session's id.
        sub_id: String,
        /// The negentropy message, decoded from hex.
        message: Vec<u8>,
    },
    /// `["NEG-CLOSE", <sub id>]` (NIP-77)
    NegClose(String),
}

/// Why a frame could not be parsed, with what is needed to answer it correlated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, not an array, or no type string: nothing to correlate with.
    #[error("{0}")]
    Uncorrelated(String),
    /// A bad EVENT or AUTH: answered with `OK <id> false "invalid: …"`. `id` is the raw `id` text
    /// when it was a string, else empty.
    #[error("{reason}")]
    BadEvent {
        /// The id as sent, or `""`.
        id: String,
        /// What was wrong.
        reason: String,
    },
    /// A bad NEG-OPEN or NEG-MSG whose id could be read: answered with
    /// `NEG-ERR <id> "invalid: …"`.
    #[error("{reason}")]
    BadNeg {
        /// The sync session's id.
        sub_id: String,
        /// What was wrong.
        reason: String,
    },
    /// A bad REQ or COUNT whose id could be read: answered with `CLOSED <id> "invalid: …"`.
    #[error("{reason}")]
    BadSubscription {
        /// The subscription / query id.
        sub_id: String,
        /// What was wrong.
        reason: String,
    },
}

/// What a refusal of a frame can be tied to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Correlation {
    /// An EVENT or AUTH with this id (as sent): answered with `OK`.
    Event(String),
    /// A REQ or COUNT with this id: answered with `CLOSED`.
    Subscription(String),
    /// A NEG-OPEN or NEG-MSG with this id: answered with `NEG-ERR`.
    Neg(String),
    /// Nothing: answered with `NOTICE`.
    None,
}

impl Correlation {
    /// The frame that refuses with `message` (`"<prefix>: <text>"`).
    pub fn refuse(self, message: String) -> RelayMessage {
        match self {
            Correlation::Event(id) => RelayMessage::ok(id, false, message),
            Correlation::Subscription(sub_id) => RelayMessage::Closed { sub_id, message },
            Correlation::Neg(sub_id) => RelayMessage::NegErr { sub_id, reason: message },
            Correlation::None => RelayMessage::Notice(message),
        }
    }
}

impl ParseError {
    /// What this failure can be tied to.
    pub fn correlation(&self) -> Correlation {
        match self {
            ParseError::Uncorrelated(_) => Correlation::None,
            ParseError::BadEvent { id, .. } => Correlation::Event(id.clone()),
            ParseError::BadSubscription { sub_id, .. } => Correlation::Subscription(sub_id.clone()),
            ParseError::BadNeg { sub_id, .. } => Correlation::Neg(sub_id.clone()),
        }
    }

    /// The frame that answers this failure, correlated where the frame allows.
    pub fn reply(&self) -> RelayMessage {
        self.correlation().refuse(format!("invalid: {self}"))
    }
}

#[derive(Deserialize)]
struct IdOnly {
    id: Option<serde_json::Value>,
}

fn raw_id(raw: &RawValue) -> String {
    serde_json::from_str::<IdOnly>(raw.get())
        .ok()
        .and_then(|v| v.id)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn event_from(raw: &RawValue) -> Result<Box<Event>, ParseError> {
    Event::from_raw(raw).map(Box::new).map_err(|e| ParseError::BadEvent {
        id: raw_id(raw),
        reason: match e {
            EventError::Malformed(m) => format!("malformed event: {}", clip(&m)),
            other => clip(&other.to_string()),
        },
    })
}

fn sub_request(parts: &[Box<RawValue>], verb: &str) -> Result<(String, Vec<Filter>), ParseError> {
    let sub_id: String = match parts.get(1).map(|p| serde_json::from_str(p.get())) {
        Some(Ok(id)) => id,
        _ => return Err(ParseError::Uncorrelated(format!("{verb} needs a string id"))),
    };
    let bad = |reason: String| ParseError::BadSubscription { sub_id: sub_id.clone(), reason };
    if sub_id.is_empty() {
        return Err(bad("subscription id must not be empty".into()));
    }
    if parts.len() < 3 {
        return Err(bad(format!("{verb} needs at least one filter")));
    }
    let filters = parts[2..]
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            serde_json::from_str::<Filter>(raw.get()).map_err(|e| bad(format!("filter {i}: {}", strip_position(&e))))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((sub_id, filters))
}

/// A NEG-OPEN (id, one filter, a hex message) or a NEG-MSG (id, a hex message).
fn neg(parts: &[Box<RawValue>], verb: &str) -> Result<ClientMessage, ParseError> {
    let sub_id: String = match parts.get(1).map(|p| serde_json::from_str(p.get())) {
        Some(Ok(id)) => id,
        _ => return Err(ParseError::Uncorrelated(format!("{verb} needs a string id"))),
    };
    let bad = |reason: String| ParseError::BadNeg { sub_id: sub_id.clone(), reason };
    if sub_id.is_empty() {
        return Err(bad("subscription id must not be empty".into()));
    }
    let open = verb == "NEG-OPEN";
    let want = if open { 4 } else { 3 };
    if parts.len() != want {
        let shape = if open { "an id, one filter and a hex message" } else { "an id and a hex message" };
        return Err(bad(format!("{verb} takes {shape}")));
    }
    let hex_text: String = serde_json::from_str(parts[want - 1].get())
        .map_err(|_| bad("the negentropy message must be a hex string".into()))?;
    let message = hex::decode(&hex_text).map_err(|e| bad(format!("the negentropy message is not hex: {e}")))?;
    if !open {
        return Ok(ClientMessage::NegMsg { sub_id, message });
    }
    let filter =
        serde_json::from_str::<Filter>(parts[2].get()).map_err(|e| bad(format!("filter: {}", strip_position(&e))))?;
    Ok(ClientMessage::NegOpen { sub_id, filter: Box::new(filter), message })
}

/// Longest stretch of the client's own input an error text repeats.
const ECHO_LIMIT: usize = 200;

/// `text` cut to [`ECHO_LIMIT`] characters (with `…` when cut): a reason may quote what the
/// client sent, and a 100k-character value must not come back in full.
fn clip(text: &str) -> String {
    match text.char_indices().nth(ECHO_LIMIT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// serde's message without its position (meaningless to a client), clipped.
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    clip(match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => &text,
    })
}

impl ClientMessage {
    /// What a refusal of this frame is tied to.
    pub fn correlation(&self) -> Correlation {
        match self {
            ClientMessage::Event(e) | ClientMessage::Auth(e) => Correlation::Event(e.id.to_hex()),
            ClientMessage::Req { sub_id, .. } | ClientMessage::Count { sub_id, .. } => {
                Correlation::Subscription(sub_id.clone())
            }
            ClientMessage::NegOpen { sub_id, .. } | ClientMessage::NegMsg { sub_id, .. } => {
                Correlation::Neg(sub_id.clone())
            }
            ClientMessage::Close(_) | ClientMessage::NegClose(_) => Correlation::None,
        }
    }

    /// Parses one text frame.
    pub fn parse(text: &str) -> Result<ClientMessage, ParseError> {
        let parts: Vec<Box<RawValue>> = serde_json::from_str(text)
            .map_err(|e| ParseError::Uncorrelated(format!("frame is not a JSON array: {}", strip_position(&e))))?;
        let verb: String = match parts.first().map(|p| serde_json::from_str(p.get())) {
            Some(Ok(v)) => v,
            _ => return Err(ParseError::Uncorrelated("frame must start with a message type string".into())),
        };
        match verb.as_str() {
            "EVENT" | "AUTH" => {
                let raw = match parts.get(1) {
                    Some(raw) if parts.len() == 2 => raw,
                    _ => {
                        return Err(ParseError::BadEvent {
                            id: parts.get(1).map(|r| raw_id(r)).unwrap_or_default(),
                            reason: format!("{verb} takes exactly one event"),
                        });
                    }
                };
                let event = event_from(raw)?;
                Ok(if verb == "EVENT" { ClientMessage::Event(event) } else { ClientMessage::Auth(event) })
            }
            "REQ" => sub_request(&parts, "REQ").map(|(sub_id, filters)| ClientMessage::Req { sub_id, filters }),
            "COUNT" => sub_request(&parts, "COUNT").map(|(sub_id, filters)| ClientMessage::Count { sub_id, filters }),
            "CLOSE" => match parts.get(1).map(|p| serde_json::from_str::<String>(p.get())) {
                Some(Ok(id)) if parts.len() == 2 => Ok(ClientMessage::Close(id)),
                _ => Err(ParseError::Uncorrelated("CLOSE takes exactly one subscription id".into())),
            },
            "NEG-OPEN" | "NEG-MSG" => neg(&parts, &verb),
            "NEG-CLOSE" => match parts.get(1).map(|p| serde_json::from_str::<String>(p.get())) {
                Some(Ok(id)) if parts.len() == 2 => Ok(ClientMessage::NegClose(id)),
                _ => Err(ParseError::Uncorrelated("NEG-CLOSE takes exactly one subscription id".into())),
            },
            other => Err(ParseError::Uncorrelated(format!("unknown message type {}", clip(&format!("{other:?}"))))),
        }
    }
}

/// The client side's writer: a frame as compact JSON, as `parse` reads it back.
impl Serialize for ClientMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        match self {
            ClientMessage::Event(event) | ClientMessage::Auth(event) => {
                seq.serialize_element(if matches!(self, ClientMessage::Event(_)) { "EVENT" } else { "AUTH" })?;
                seq.serialize_element(event)?;
            }
            ClientMessage::Req { sub_id, filters } | ClientMessage::Count { sub_id, filters } => {
                seq.serialize_element(if matches!(self, ClientMessage::Req { .. }) { "REQ" } else { "COUNT" })?;
                seq.serialize_element(sub_id)?;
                for filter in filters {
                    seq.serialize_element(filter)?;
                }
            }
            ClientMessage::Close(sub_id) => {
                seq.serialize_element("CLOSE")?;
                seq.serialize_element(sub_id)?;
            }
            ClientMessage::NegOpen { sub_id, filter, message } => {
                seq.serialize_element("NEG-OPEN")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(filter)?;
                seq.serialize_element(&hex::encode(message))?;
            }
            ClientMessage::NegMsg { sub_id, message } => {
                seq.serialize_element("NEG-MSG")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(&hex::encode(message))?;
            }
            ClientMessage::NegClose(sub_id) => {
                seq.serialize_element("NEG-CLOSE")?;
                seq.serialize_element(sub_id)?;
            }
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests;
