//! Pure NIP-01/29/42/45/50/98 protocol types: events, filters, wire messages, the refusal
//! vocabulary and NIP-50's search language.
//!
//! Owns parsing bytes into typed values and serializing typed values back to bytes. Nothing in here
//! touches tokio, warp or sled, so every rule is unit-tested without a socket. Hex is parsed once,
//! at this edge, into fixed-size newtypes ([`EventId`], [`PubKey`], [`Sig`]).

pub mod blossom;
pub mod event;
pub mod filter;
pub mod keys;
pub mod message;
pub mod nip19;
pub mod nip29;
pub mod nip42;
pub mod nip98;
pub mod private;
pub mod refusal;
pub mod relay_message;
pub mod search;
pub mod tier;
pub mod verify;

pub use event::{Event, EventId, EventJson, Kind, KindClass, PubKey, Sig, Timestamp};
pub use filter::Filter;
pub use keys::Keys;
pub use message::{ClientMessage, Correlation, ParseError, RelayMessage};
pub use private::{GroupScreen, PrivateKinds, Viewer};
pub use tier::Tier;
pub use verify::{VerifiedEvent, VerifyError};

/// The REST answers' header naming the quota tier the caller is billed at (`human` or `agent`),
/// so a client can pace itself at its tier's `api_calls_per_min` from NIP-11 `hearth_limits`.
pub const TIER_HEADER: &str = "x-hearth-tier";
