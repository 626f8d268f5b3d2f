//! The frames a relay sends: `EVENT`, `OK`, `EOSE`, `CLOSED`, `NOTICE`, `AUTH`, `COUNT`,
//! `NEG-MSG`, `NEG-ERR`, as [`RelayMessage`], serialized with serde (an `EVENT` splices in its
//! event's JSON, already serialized, so a stored event goes out byte for byte as it was stored).

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use super::event::EventJson;

/// A relay frame. Serialized with serde, except that an `EVENT` frame splices in its event's
/// JSON, which is already serialized (see [`RelayMessage::to_json`]).
#[derive(Clone, Debug, PartialEq)]
pub enum RelayMessage {
    /// `["EVENT", <sub id>, <event>]`, the event JSON shared between subscribers.
    Event {
        /// Subscription id.
        sub_id: String,
        /// The event, already serialized once.
        event: EventJson,
    },
    /// `["OK", <id>, <accepted>, <message>]`
    Ok {
        /// The event id as the client sent it.
        id: String,
        /// Whether the event was accepted.
        accepted: bool,
        /// `""` or `"<prefix>: <text>"`.
        message: String,
    },
    /// `["EOSE", <sub id>]`
    Eose(String),
    /// `["CLOSED", <sub id>, <message>]`
    Closed {
        /// Subscription id.
        sub_id: String,
        /// `"<prefix>: <text>"`.
        message: String,
    },
    /// `["NOTICE", <message>]`
    Notice(String),
    /// `["AUTH", <challenge>]`
    Auth(String),
    /// `["COUNT", <query id>, {"count": n}]`
    Count {
        /// Query id.
        sub_id: String,
        /// How many events match.
        count: u64,
    },
    /// `["NEG-MSG", <sub id>, <message, hex>]` (NIP-77)
    NegMsg {
        /// The sync session's id.
        sub_id: String,
        /// The negentropy message (sent as hex).
        message: Vec<u8>,
    },
    /// `["NEG-ERR", <sub id>, <reason>]` (NIP-77): the session is over.
    NegErr {
        /// The sync session's id.
        sub_id: String,
        /// `"<prefix>: <text>"`.
        reason: String,
    },
}

impl RelayMessage {
    /// An `OK` frame.
    pub fn ok(id: impl Into<String>, accepted: bool, message: impl Into<String>) -> RelayMessage {
        RelayMessage::Ok { id: id.into(), accepted, message: message.into() }
    }

    /// The frame as compact JSON text.
    ///
    /// An `EVENT` frame is mostly its event, which is already JSON: it is spliced in as it is,
    /// into one buffer sized for the frame up front, and only the subscription id is escaped.
    /// Every other frame is serialized with serde.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        if let RelayMessage::Event { sub_id, event } = self {
            let sub_id = serde_json::to_string(sub_id)?;
            let mut out = String::with_capacity(event.as_str().len() + sub_id.len() + 12);
            out.push_str("[\"EVENT\",");
            out.push_str(&sub_id);
            out.push(',');
            out.push_str(event.as_str());
            out.push(']');
            return Ok(out);
        }
        serde_json::to_string(self)
    }
}

#[derive(Serialize)]
struct CountBody {
    count: u64,
}

impl Serialize for RelayMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        match self {
            RelayMessage::Event { sub_id, event } => {
                seq.serialize_element("EVENT")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(event)?;
            }
            RelayMessage::Ok { id, accepted, message } => {
                seq.serialize_element("OK")?;
                seq.serialize_element(id)?;
                seq.serialize_element(accepted)?;
                seq.serialize_element(message)?;
            }
            RelayMessage::Eose(sub_id) => {
                seq.serialize_element("EOSE")?;
                seq.serialize_element(sub_id)?;
            }
            RelayMessage::Closed { sub_id, message } => {
                seq.serialize_element("CLOSED")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(message)?;
            }
            RelayMessage::Notice(message) => {
                seq.serialize_element("NOTICE")?;
                seq.serialize_element(message)?;
            }
            RelayMessage::Auth(challenge) => {
                seq.serialize_element("AUTH")?;
                seq.serialize_element(challenge)?;
            }
            RelayMessage::Count { sub_id, count } => {
                seq.serialize_element("COUNT")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(&CountBody { count: *count })?;
            }
            RelayMessage::NegMsg { sub_id, message } => {
                seq.serialize_element("NEG-MSG")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(&hex::encode(message))?;
            }
            RelayMessage::NegErr { sub_id, reason } => {
                seq.serialize_element("NEG-ERR")?;
                seq.serialize_element(sub_id)?;
                seq.serialize_element(reason)?;
            }
        }
        seq.end()
    }
}
