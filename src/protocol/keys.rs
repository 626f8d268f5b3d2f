//! Secret keys and event signing, for the client library, the CLI and tests.
//!
//! Owns turning a secret key (hex or NIP-19 `nsec`) into a keypair and an unsigned event into a
//! signed [`Event`]. The relay itself never signs anything.

use secp256k1::{Keypair, SECP256K1};

use super::event::{Event, EventId, Kind, PubKey, Sig, Timestamp};

/// Why a secret key could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// Not 64 hex characters or a valid `nsec`.
    #[error("secret key must be 64 hex characters or an nsec")]
    Format,
    /// Zero or not below the curve order.
    #[error("secret key is out of range")]
    Range,
}

/// A signing keypair.
#[derive(Clone)]
pub struct Keys {
    keypair: Keypair,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({})", self.public_key())
    }
}

impl Keys {
    /// Reads a secret key from 64 hex characters (either case) or a bech32 `nsec`.
    pub fn parse(secret: &str) -> Result<Keys, KeyError> {
        let secret = secret.trim();
        let bytes: [u8; 32] = if secret.starts_with("nsec1") {
            super::nip19::decode("nsec", secret).ok_or(KeyError::Format)?
        } else {
            let mut out = [0u8; 32];
            hex::decode_to_slice(secret, &mut out).map_err(|_| KeyError::Format)?;
            out
        };
        Keys::from_bytes(bytes)
    }

    /// A keypair from 32 secret bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Result<Keys, KeyError> {
        let keypair = Keypair::from_seckey_byte_array(SECP256K1, bytes).map_err(|_| KeyError::Range)?;
        Ok(Keys { keypair })
    }

    /// The x-only public key.
    pub fn public_key(&self) -> PubKey {
        PubKey(self.keypair.x_only_public_key().0.serialize())
    }

    /// The secret key as lowercase hex.
    pub fn secret_hex(&self) -> String {
        hex::encode(self.keypair.secret_bytes())
    }

    /// Builds, hashes and signs an event.
    pub fn sign(&self, created_at: Timestamp, kind: Kind, tags: Vec<Vec<String>>, content: &str) -> Event {
        let mut event = Event {
            id: EventId([0; 32]),
            pubkey: self.public_key(),
            created_at,
            kind,
            tags,
            content: content.to_string(),
            sig: Sig([0; 64]),
        };
        event.id = event.compute_id();
        let sig = self.keypair.sign_schnorr_no_aux_rand(&event.id.0);
        event.sig = Sig(sig.to_byte_array());
        event
    }
}

/// The unit tests' keys: one helper for every module's tests.
#[cfg(test)]
impl Keys {
    /// Key number `n` (1 to 255): the secret `[n; 32]`, the same key in every test that names it.
    pub(crate) fn test(n: u8) -> Keys {
        assert!(n > 0, "the secret [0; 32] is not a key: number test keys from 1");
        Keys::from_bytes([n; 32]).unwrap_or_else(|e| panic!("test key {n}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::verify::verify;

    #[test]
    fn signed_events_verify() {
        let keys = Keys::parse(&"01".repeat(32)).unwrap();
        let event = keys.sign(Timestamp(1), Kind(1), vec![vec!["t".into(), "x".into()]], "hi");
        assert!(verify(event).is_ok());
    }

    #[test]
    fn zero_key_is_out_of_range() {
        assert_eq!(Keys::parse(&"00".repeat(32)).unwrap_err(), KeyError::Range);
        assert_eq!(Keys::parse("xyz").unwrap_err(), KeyError::Format);
    }
}
