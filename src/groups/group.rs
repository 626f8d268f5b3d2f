//! One group as its events made it: metadata, members and roles, invites, waiting join requests,
//! deleted ids and pins.
//!
//! Owns [`Group`] and [`Invite`] and what a group answers of itself (who is a member, who holds a
//! role, who may read or see it); how events change it is `groups::state`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::protocol::nip29::{Metadata, Pin};
use crate::protocol::{EventId, PubKey, Timestamp};

/// An invite code of a group (9009).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invite {
    /// Joins it lets in at most (`["uses", "n"]`); `None`: any number.
    pub uses: Option<u32>,
    /// Joins it has let in.
    pub used: u32,
    /// When it stops being good (its NIP-40 `expiration`).
    pub expires_at: Option<u64>,
}

/// One group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Its id (the `h` of its events, the `d` of its state events).
    pub id: String,
    /// How it is shown, and its flags.
    pub metadata: Metadata,
    /// Members and their roles (none: a plain member).
    pub members: BTreeMap<PubKey, Vec<String>>,
    /// Invite codes.
    pub invites: HashMap<String, Invite>,
    /// Join requests waiting for an admin: who, and when they asked.
    pub pending: BTreeMap<PubKey, Timestamp>,
    /// Events its moderators deleted: never stored again.
    pub deleted: BTreeSet<EventId>,
    /// Its pinned events, as its last 9010 named them; `None` until one came (no 39005 yet).
    pub pins: Option<Vec<Pin>>,
    /// The latest event of its state applied (moderation, join, leave): when, and which.
    pub last: (Timestamp, EventId),
}

impl Group {
    /// True for a member.
    pub fn is_member(&self, pubkey: &PubKey) -> bool {
        self.members.contains_key(pubkey)
    }

    /// True when `pubkey` holds `role`.
    pub fn has_role(&self, pubkey: &PubKey, role: &str) -> bool {
        self.members.get(pubkey).is_some_and(|roles| roles.iter().any(|r| r == role))
    }

    /// True when `reader` may read the group's events (a private group: members only).
    pub fn may_read(&self, reader: Option<&PubKey>) -> bool {
        !self.metadata.private || reader.is_some_and(|r| self.is_member(r))
    }

    /// True when `reader` may see the group's metadata (a hidden group: members only).
    pub fn may_see(&self, reader: Option<&PubKey>) -> bool {
        !self.metadata.hidden || reader.is_some_and(|r| self.is_member(r))
    }
}
