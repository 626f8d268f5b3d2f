//! Id and signature verification.
//!
//! Owns the only way to make a [`VerifiedEvent`]: [`verify`] recomputes the id from the parsed
//! fields and checks the BIP-340 signature over it. Storage and fan-out take `VerifiedEvent`, so an
//! unchecked event cannot reach them. It is the costliest step of a publish (docs/src/performance.md,
//! Performance): callers run it on the task of the connection or request it belongs to, so the
//! scheduler shares the cores fairly (see `ingest`).

use secp256k1::{SECP256K1, XOnlyPublicKey, schnorr};

use super::event::{Event, EventId};

/// Why an event failed verification. The text follows `invalid: ` on the wire.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// The claimed id is not the sha256 of the canonical serialization.
    #[error("event id does not match its content (computed {0})")]
    IdMismatch(EventId),
    /// The pubkey is not an x coordinate on the curve.
    #[error("pubkey is not a valid secp256k1 x-only key")]
    BadPubKey,
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
}

/// An event whose id and signature have been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedEvent(Event);

impl VerifiedEvent {
    /// The checked event.
    pub fn event(&self) -> &Event {
        &self.0
    }

    /// Gives the event back.
    pub fn into_event(self) -> Event {
        self.0
    }
}

impl std::ops::Deref for VerifiedEvent {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.0
    }
}

/// Checks the id and the signature of `event`.
pub fn verify(event: Event) -> Result<VerifiedEvent, VerifyError> {
    let computed = event.compute_id();
    if computed != event.id {
        return Err(VerifyError::IdMismatch(computed));
    }
    let key = XOnlyPublicKey::from_byte_array(event.pubkey.0).map_err(|_| VerifyError::BadPubKey)?;
    let sig = schnorr::Signature::from_byte_array(event.sig.0);
    SECP256K1.verify_schnorr(&sig, &event.id.0, &key).map_err(|_| VerifyError::BadSignature)?;
    Ok(VerifiedEvent(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_vector_verifies() {
        let valid = include_str!("../../tests/vectors/valid.jsonl");
        let mut n = 0;
        for line in valid.lines().filter(|l| !l.trim().is_empty()) {
            let event = Event::from_json(line).unwrap();
            verify(event).unwrap();
            n += 1;
        }
        assert_eq!(n, 163);
    }

    #[test]
    fn every_invalid_vector_fails_to_parse_or_verify() {
        let invalid = include_str!("../../tests/vectors/invalid.jsonl");
        for line in invalid.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let text = v["event"].to_string();
            let outcome = Event::from_json(&text).map(verify);
            assert!(!matches!(outcome, Ok(Ok(_))), "defect {} was accepted", v["defect"]);
        }
    }
}
