//! Members and invites (NIP-43, `access.mode`): who is a member, who may publish and read, and
//! the invite codes a join request claims.
//!
//! Owns these methods of [`Moderation`]: the questions the gate, the publish path and the admin
//! API ask (member, member count, the access mode's refusal, members' mail, restricted writes)
//! and the named changes ([`Moderation::add_member`], [`Moderation::remove_member`],
//! [`Moderation::join_with_invite`], [`Moderation::keep_invite`], [`Moderation::revoke_invite`]).

use crate::config::AccessMode;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, PubKey};
use crate::store::Store;

use super::live::{Moderation, ModerationError};
use super::state::{Invite, State};

impl Moderation {
    /// `access.mode`.
    pub fn mode(&self) -> AccessMode {
        self.mode
    }

    /// True when only listed authors may publish (NIP-11 `restricted_writes`).
    pub fn restricted_writes(&self) -> bool {
        self.read(|s| self.writes_restricted(s))
    }

    /// True when only members publish: in a members mode, or in `public` with a member list.
    pub(super) fn writes_restricted(&self, s: &State) -> bool {
        self.mode != AccessMode::Public || !self.members.is_empty() || !s.allowed_pubkeys.is_empty()
    }

    /// How many keys are members (`auth.members` and the list kept live, each once).
    pub fn member_count(&self) -> usize {
        self.read(|s| {
            s.allowed_pubkeys.len() + self.members.iter().filter(|m| !s.allowed_pubkeys.contains_key(m)).count()
        })
    }

    /// True when `pubkey` is a member: in `auth.members` or the member list kept live.
    pub fn is_member(&self, pubkey: &PubKey) -> bool {
        self.members.contains(pubkey) || self.read(|s| s.allowed_pubkeys.contains_key(pubkey))
    }

    /// Why a connection authenticated as `reader` (none: not authenticated) may not read or
    /// publish at all under `access.mode = "members-only"`; `None` when it may (and in every
    /// other mode). The text is the whole message, prefix included.
    pub fn access_refusal(&self, reader: Option<PubKey>) -> Option<Refusal> {
        if self.mode != AccessMode::MembersOnly {
            return None;
        }
        match reader {
            None => {
                Some(Refusal::new(Prefix::AuthRequired, "this relay is for its members; answer the AUTH challenge"))
            }
            Some(pubkey) if !self.is_member(&pubkey) => {
                Some(Refusal::new(Prefix::Restricted, "this relay is for its members only"))
            }
            Some(_) => None,
        }
    }

    /// True when `event` is members' mail from outside: a gift wrap or zap receipt to a member
    /// ([`crate::protocol::private::mail_recipient`]).
    pub fn is_mail_to_member(&self, event: &Event) -> bool {
        crate::protocol::private::mail_recipient(&event.tags, event.kind).is_some_and(|r| self.is_member(&r))
    }

    /// True when `code` is an invite code kept here (good or spent).
    pub fn has_invite(&self, code: &str) -> bool {
        self.read(|s| s.invites.contains_key(code))
    }

    /// Adds `pubkey` to the member list kept live, with the operator's note; the note it had
    /// before, if it was one.
    pub async fn add_member(
        &self,
        store: &Store,
        pubkey: PubKey,
        note: String,
    ) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.allowed_pubkeys.insert(pubkey, note)).await
    }

    /// Takes `pubkey` off the member list kept live; its note, if it was on it.
    pub async fn remove_member(&self, store: &Store, pubkey: PubKey) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.allowed_pubkeys.remove(&pubkey)).await
    }

    /// A join request with invite `code` at `now`, in one change: the code checked and used and
    /// `pubkey` made a member. `Ok(true)` when it became one, `Ok(false)` when it already was;
    /// `Err` with why the code is refused (nothing changes).
    pub async fn join_with_invite(
        &self,
        store: &Store,
        pubkey: PubKey,
        code: &str,
        now: u64,
    ) -> Result<Result<bool, &'static str>, ModerationError> {
        self.update(store, |s: &mut State| {
            if s.allowed_pubkeys.contains_key(&pubkey) {
                return Ok(false);
            }
            let invite = s.invites.get_mut(code).ok_or(match code.is_empty() {
                true => "only members publish here: join with an invite code from a member",
                false => "this invite code is not valid",
            })?;
            if let Some(why) = invite.refusal(now) {
                return Err(why);
            }
            invite.used += 1;
            let note = format!("joined with an invite ({})", invite.note);
            Ok(s.allowed_pubkeys.insert(pubkey, note).is_none())
        })
        .await
    }

    /// Keeps a new invite code.
    pub async fn keep_invite(&self, store: &Store, code: String, invite: Invite) -> Result<(), ModerationError> {
        self.update(store, |s| {
            s.invites.insert(code, invite);
        })
        .await
    }

    /// Revokes an invite code; what it was, if it was kept.
    pub async fn revoke_invite(&self, store: &Store, code: &str) -> Result<Option<Invite>, ModerationError> {
        self.update(store, |s| s.invites.remove(code)).await
    }
}
