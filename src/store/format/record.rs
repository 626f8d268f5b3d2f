//! The stored form of one event: a fixed binary header, then the event's tags and content as the
//! compact JSON the relay sends.
//!
//! Owns the byte layout of an `e` record. The header carries everything the in-memory index and
//! the expiry check need (`created_at`, kind, expiration, id, pubkey) as raw bytes, so rebuilding
//! the index reads no JSON but the tags, and serving an event is one copy plus 256 hex digits:
//!
//! | bytes     | field                                   |
//! |-----------|-----------------------------------------|
//! | 0         | record format (1)                       |
//! | 1..9      | created_at, u64 big-endian              |
//! | 9..11     | kind, u16 big-endian                    |
//! | 11..19    | NIP-40 expiration, u64 (0 = none)       |
//! | 19..51    | id                                      |
//! | 51..83    | pubkey                                  |
//! | 83..147   | sig                                     |
//! | 147..151  | length of the tags JSON, u32 big-endian |
//! | 151..     | tags JSON, then content as a JSON string|
//!
//! About 190 bytes fewer than the event's JSON: the hex fields are stored as bytes and the field
//! names are not stored at all.

use crate::protocol::{Event, EventId, Kind, PubKey, Sig, Timestamp};

/// First byte of every record (frames of other kinds in the event log start with other bytes).
pub const FORMAT: u8 = 1;
const HEADER: usize = 151;
/// Where the id ends in a record: its first bytes (format, created_at, kind, expiration, id) are
/// what a reader of ids alone reads ([`prefix`]).
pub const PREFIX: usize = 51;

/// A stored record could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("event record: {0}")]
pub struct RecordError(&'static str);

/// The fixed-size part of a record: what the index and the expiry check need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub id: EventId,
    pub pubkey: PubKey,
    pub created_at: Timestamp,
    pub kind: Kind,
    /// NIP-40 expiration; 0 = none.
    pub expiration: u64,
    /// The whole record's length in bytes.
    pub len: u32,
}

impl Header {
    /// True when the event has expired at `now` (NIP-40: at or after its expiration).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expiration != 0 && self.expiration <= now.0
    }
}

/// Encodes a (verified) event.
pub fn encode(event: &Event) -> Vec<u8> {
    let tags = serde_json::to_string(&event.tags).unwrap_or_else(|_| "[]".into());
    let content = serde_json::to_string(&event.content).unwrap_or_else(|_| "\"\"".into());
    let mut out = Vec::with_capacity(HEADER + tags.len() + content.len());
    out.push(FORMAT);
    out.extend_from_slice(&event.created_at.0.to_be_bytes());
    out.extend_from_slice(&event.kind.0.to_be_bytes());
    out.extend_from_slice(&event.expiration().map_or(0, |t| t.0).to_be_bytes());
    out.extend_from_slice(&event.id.0);
    out.extend_from_slice(&event.pubkey.0);
    out.extend_from_slice(&event.sig.0);
    out.extend_from_slice(&u32::try_from(tags.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(tags.as_bytes());
    out.extend_from_slice(content.as_bytes());
    out
}

fn array<const N: usize>(record: &[u8], at: usize) -> Result<[u8; N], RecordError> {
    record.get(at..at + N).and_then(|s| s.try_into().ok()).ok_or(RecordError("truncated header"))
}

/// The created_at and id of a record's first [`PREFIX`] bytes (NIP-77's items), read without the
/// rest of the record.
pub fn prefix(first: &[u8]) -> Result<(Timestamp, EventId), RecordError> {
    if first.first() != Some(&FORMAT) {
        return Err(RecordError("unknown record format"));
    }
    Ok((Timestamp(u64::from_be_bytes(array(first, 1)?)), EventId(array(first, 19)?)))
}

/// Decodes the header only.
pub fn header(record: &[u8]) -> Result<Header, RecordError> {
    if record.first() != Some(&FORMAT) {
        return Err(RecordError("unknown record format"));
    }
    Ok(Header {
        created_at: Timestamp(u64::from_be_bytes(array(record, 1)?)),
        kind: Kind(u16::from_be_bytes(array(record, 9)?)),
        expiration: u64::from_be_bytes(array(record, 11)?),
        id: EventId(array(record, 19)?),
        pubkey: PubKey(array(record, 51)?),
        len: u32::try_from(record.len()).map_err(|_| RecordError("longer than 4 GiB"))?,
    })
}

/// The tags JSON and the content JSON string of a record.
fn body(record: &[u8]) -> Result<(&str, &str), RecordError> {
    let len = u32::from_be_bytes(array(record, 147)?) as usize;
    let rest = record.get(HEADER..).ok_or(RecordError("truncated header"))?;
    if rest.len() < len {
        return Err(RecordError("truncated tags"));
    }
    let (tags, content) = rest.split_at(len);
    let tags = std::str::from_utf8(tags).map_err(|_| RecordError("tags are not UTF-8"))?;
    let content = std::str::from_utf8(content).map_err(|_| RecordError("content is not UTF-8"))?;
    Ok((tags, content))
}

/// The event's tags. An empty tag is refused here as it is on arrival (the fuzzer found a
/// record with one decoding to an event no client would take).
pub fn tags(record: &[u8]) -> Result<Vec<Vec<String>>, RecordError> {
    let tags: Vec<Vec<String>> =
        serde_json::from_str(body(record)?.0).map_err(|_| RecordError("tags are not a JSON array of string arrays"))?;
    if tags.iter().any(Vec::is_empty) {
        return Err(RecordError("a tag is empty"));
    }
    Ok(tags)
}

/// The whole event.
pub fn decode(record: &[u8]) -> Result<Event, RecordError> {
    let h = header(record)?;
    let (_, content) = body(record)?;
    Ok(Event {
        id: h.id,
        pubkey: h.pubkey,
        created_at: h.created_at,
        kind: h.kind,
        tags: tags(record)?,
        content: serde_json::from_str(content).map_err(|_| RecordError("content is not a JSON string"))?,
        sig: Sig(array(record, 83)?),
    })
}

/// The event's compact JSON, exactly as [`Event::to_json`] writes it, in a string allocated at
/// its exact length (so turning it into a boxed JSON value does not reallocate).
pub fn render(record: &[u8]) -> Result<String, RecordError> {
    use std::fmt::Write;
    let h = header(record)?;
    let sig: [u8; 64] = array(record, 83)?;
    let (tags, content) = body(record)?;
    let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
    let len = RENDERED_FIXED + digits(h.created_at.0) + digits(u64::from(h.kind.0)) + tags.len() + content.len();
    let mut hex_buf = [0u8; 128];
    let mut out = String::with_capacity(len);
    out.push_str("{\"id\":\"");
    out.push_str(hex_of(&h.id.0, &mut hex_buf));
    out.push_str("\",\"pubkey\":\"");
    out.push_str(hex_of(&h.pubkey.0, &mut hex_buf));
    out.push_str("\",\"created_at\":");
    // Writing to a String cannot fail.
    let _ = write!(out, "{},\"kind\":{}", h.created_at.0, h.kind.0);
    out.push_str(",\"tags\":");
    out.push_str(tags);
    out.push_str(",\"content\":");
    out.push_str(content);
    out.push_str(",\"sig\":\"");
    out.push_str(hex_of(&sig, &mut hex_buf));
    out.push_str("\"}");
    Ok(out)
}

/// The rendered JSON's length without its two numbers, tags and content: the field names and
/// punctuation (71 bytes) and the hex of the id, pubkey and sig (256).
const RENDERED_FIXED: usize = 71 + 256;

/// Lowercase hex of `bytes` (at most 64) in `buf`.
fn hex_of<'b>(bytes: &[u8], buf: &'b mut [u8; 128]) -> &'b str {
    let out = &mut buf[..bytes.len() * 2];
    // The buffer is exactly twice the input, so encoding cannot fail; hex digits are ASCII.
    let _ = hex::encode_to_slice(bytes, out);
    std::str::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_equals_to_json_for_every_vector() {
        let valid = include_str!("../../../tests/vectors/valid.jsonl");
        for line in valid.lines().filter(|l| !l.trim().is_empty()) {
            let event = Event::from_json(line).unwrap();
            let record = encode(&event);
            let rendered = render(&record).unwrap();
            assert_eq!(rendered, event.to_json().unwrap(), "{line}");
            assert_eq!(rendered.capacity(), rendered.len(), "{line}");
            assert_eq!(decode(&record).unwrap(), event);
            let h = header(&record).unwrap();
            assert_eq!((h.id, h.pubkey, h.created_at, h.kind), (event.id, event.pubkey, event.created_at, event.kind));
            assert_eq!(h.expiration, event.expiration().map_or(0, |t| t.0));
        }
    }

    #[test]
    fn a_record_with_an_empty_tag_does_not_decode() {
        let mut event =
            Event::from_json(include_str!("../../../tests/vectors/valid.jsonl").lines().next().unwrap()).unwrap();
        event.tags = vec![vec![], vec!["t".into(), "x".into()]];
        let record = encode(&event);
        assert_eq!(decode(&record).unwrap_err().to_string(), "event record: a tag is empty");
        assert!(tags(&record).is_err());
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let event =
            Event::from_json(include_str!("../../../tests/vectors/valid.jsonl").lines().next().unwrap()).unwrap();
        let record = encode(&event);
        for n in 0..record.len() {
            let cut = &record[..n];
            if n < HEADER {
                assert!(render(cut).is_err(), "len {n}");
            }
            assert!(decode(cut).is_err(), "len {n}");
        }
        assert!(header(&[9; 200]).is_err());
    }
}
