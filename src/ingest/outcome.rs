//! What the publish path answers, and who it answers: the typed [`Outcome`] each transport maps
//! to its wire (`OK` on WebSocket, a status code over HTTP), and the [`Publisher`] it is for.

use crate::limiter::Billed;
use crate::protocol::PubKey;
use crate::protocol::refusal::{Prefix, Refusal};

/// What happened to a published event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Stored durably (or, for ephemeral kinds, delivered live).
    Accepted,
    /// Already stored: accepted, never stored twice.
    Duplicate,
    /// A NIP-43 join request from a member: accepted, nothing changed.
    AlreadyMember,
    /// Not accepted: rejected, or rate-limited (`messages` quota or the handler bound) with its
    /// retry time.
    Refused(Refusal),
}

impl Outcome {
    /// True for every outcome but `Refused`.
    pub fn accepted(&self) -> bool {
        matches!(self, Outcome::Accepted | Outcome::Duplicate | Outcome::AlreadyMember)
    }

    /// The `OK` message text: `""`, `"duplicate: …"` or the refusal.
    pub fn message(&self) -> String {
        match self {
            Outcome::Accepted => String::new(),
            Outcome::Duplicate => "duplicate: already have this event".into(),
            Outcome::AlreadyMember => crate::membership::ALREADY_MEMBER.into(),
            Outcome::Refused(r) => r.to_string(),
        }
    }

    pub(crate) fn refused(prefix: Prefix, text: impl Into<String>) -> Outcome {
        Outcome::Refused(Refusal::new(prefix, text))
    }
}

/// Who is publishing.
#[derive(Clone, Debug)]
pub struct Publisher {
    /// The NIP-42 / NIP-98 authenticated pubkey, if any.
    pub authed: Option<PubKey>,
    /// Who is billed: the authenticated pubkey (else the client IP), and the IP's ceiling.
    pub billed: Billed,
    /// What names this relay in a `relay` tag (`server.public_url`, else the `Host` the client
    /// reached): a request to vanish (NIP-62) must name it, or every relay.
    pub relay: Option<crate::protocol::nip42::RelayMatch>,
}
