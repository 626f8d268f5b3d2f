//! NIP-19 bech32 forms of keys (`npub`, `nsec`).
//!
//! Owns converting 32-byte keys to and from their bech32 text. Nothing else of NIP-19 (no TLV
//! entities) is needed by hearth.

use bech32::{Bech32, Hrp};

use super::event::PubKey;

/// Decodes `text` as bech32 with the human-readable part `hrp` and a 32-byte payload.
pub fn decode(hrp: &str, text: &str) -> Option<[u8; 32]> {
    let (got, data) = bech32::decode(text).ok()?;
    if got.as_str() != hrp {
        return None;
    }
    data.try_into().ok()
}

/// Encodes 32 bytes as bech32 with the human-readable part `hrp`.
pub fn encode(hrp: &str, bytes: &[u8; 32]) -> String {
    match Hrp::parse(hrp) {
        Ok(hrp) => bech32::encode::<Bech32>(hrp, bytes).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

impl PubKey {
    /// A pubkey given as 64 hex characters (either case) or as an `npub`, as operators and
    /// admin callers write it (events themselves carry lowercase hex only).
    pub fn parse(text: &str) -> Option<PubKey> {
        let text = text.trim();
        if text.starts_with("npub1") {
            decode("npub", text).map(PubKey)
        } else {
            PubKey::from_hex(&text.to_ascii_lowercase())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npub_round_trips_and_checks_hrp() {
        // NIP-19's own example key.
        let hex = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e";
        let npub = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg";
        let bytes = decode("npub", npub).unwrap();
        assert_eq!(PubKey::parse(&hex.to_uppercase()), Some(PubKey(bytes)));
        assert_eq!(hex::encode(bytes), hex);
        assert_eq!(encode("npub", &bytes), npub);
        assert!(decode("nsec", npub).is_none());
    }
}
