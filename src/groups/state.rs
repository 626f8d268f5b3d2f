//! A group's state as the fold of its events, in their one canonical order.
//!
//! Owns [`Groups`]: every group's metadata, members and their roles, invite codes, join requests
//! waiting for an admin and the ids its moderators deleted, derived from the group's stored
//! events taken oldest first, events of the same second in the order they were stored (the
//! order `Store::export` gives them in), and nothing else. The same [`Groups::apply`] admits
//! an event as it arrives and replays the store at start-up, so a restart, an import, a second
//! node or a second store backend arrive at exactly the state the first one had. No clock, no
//! I/O: what an action asks of the world (the relay's own answer to a join, events to remove)
//! comes back as an [`Effect`] for the caller to carry out.
//!
//! An event of the group's state (9000–9022) dated before the last one applied would take
//! another place on replay than the one it came in at: [`Groups::judge`] refuses it
//! ([`GroupError::OutOfOrder`]) and the caller judges it where the replay will put it, folding
//! the group's stored events again around it (`groups::publish`). One of the same second is
//! stored after those before it and so stays after them. Who may do what:
//!
//! | action | who |
//! |---|---|
//! | 9007 create-group | anyone the caller lets create (`groups.create`); the creator is its `admin` |
//! | 9000 put-user, 9002 edit-metadata, 9008 delete-group | `admin` |
//! | 9001 remove-user | `admin`; `moderator` for a member with no role |
//! | 9005 delete-event, 9009 create-invite, 9010 update-pin-list | `admin`, `moderator` |
//! | anything | the relay's own key |

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use super::group::{Group, Invite};
use crate::protocol::nip29::{Action, Metadata};
use crate::protocol::{Event, EventId, PubKey, Timestamp};

/// The role that may do everything in its group.
pub const ADMIN: &str = "admin";
/// The role that may delete events, remove plain members and create invites.
pub const MODERATOR: &str = "moderator";

/// Why a group event is refused, each with the words a client is told.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// `invalid:` the event does not say what it asks for.
    #[error("{0}")]
    Malformed(String),
    /// `invalid:` no `h` tag.
    #[error("an event to a group needs an `h` tag with the group's id")]
    NoGroupTag,
    /// `invalid:` the group has no such id.
    #[error("there is no group `{0}` on this relay; create it first (kind 9007)")]
    NoSuchGroup(String),
    /// `duplicate:` a 9007 for a group that exists.
    #[error("the group `{0}` exists already")]
    Exists(String),
    /// `restricted:` the sender's roles do not allow it.
    #[error("{0}")]
    NotAllowed(String),
    /// `invalid:` dated before the group's last change.
    #[error(
        "a change to a group may not be dated before its last change (created_at {0}); sign it again with the time now"
    )]
    OutOfOrder(u64),
    /// `invalid:` a parent that would make a cycle.
    #[error("`{0}` cannot be this group's parent: that would make a cycle of groups")]
    Cycle(String),
    /// `duplicate:` a join from a member.
    #[error("already a member of this group")]
    AlreadyMember,
    /// `restricted:` a leave from someone who is not a member.
    #[error("not a member of this group")]
    NotMember,
    /// `restricted:` a join with a code that does not let anyone in; final.
    #[error("this invite code is not valid for this group; the refusal is final")]
    BadCode,
    /// `restricted:` a message to a restricted group from someone who is not a member.
    #[error("not a member of this group: only its members write to it; join the group first")]
    MembersOnly,
    /// `invalid:` a kind the group does not take.
    #[error("this group does not take kind {0} (see its supported_kinds)")]
    Unsupported(u16),
    /// `blocked:` an event the group's moderators deleted.
    #[error("deleted by the group's moderators")]
    Deleted,
}

/// What applying an event asks of the world (live only: a replay carries out nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A message, or a request that changes nothing: nothing to do.
    Nothing,
    /// The group's state changed: its state events are signed anew (and its subgroups', whose
    /// `parent` may now name it or no longer).
    Changed,
    /// The group's state changed and these of its events are to be removed from the store.
    Removed(Vec<EventId>),
    /// The group is gone: its state events, and every event of it, are to be removed.
    GroupDeleted,
    /// A join the relay lets in: it signs a 9000 for `pubkey` (naming the `code` used).
    Admit {
        /// Who.
        pubkey: PubKey,
        /// The invite code it used.
        code: Option<String>,
    },
    /// A join of a closed group without a code: kept as a request for the group's admins.
    Pending,
    /// A leave: the relay signs a 9001 for `pubkey`.
    Remove(PubKey),
}

/// Every group of the relay.
#[derive(Clone, Debug)]
pub struct Groups {
    relay: PubKey,
    groups: HashMap<String, Group>,
}

impl Groups {
    /// No groups yet; `relay` is the relay's own key, which may do anything.
    pub fn new(relay: PubKey) -> Groups {
        Groups { relay, groups: HashMap::new() }
    }

    /// The group `id`.
    pub fn get(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    /// The relay's own key, which may do anything.
    pub fn relay(&self) -> PubKey {
        self.relay
    }

    /// Whether `reader` may be sent `event` as far as groups go: not an event of a private
    /// group it is not a member of (its `h`), nor a state event of a hidden one (its `d`).
    pub fn may_deliver(&self, event: &Event, reader: Option<&PubKey>) -> bool {
        let readable = event.tag_values("h").all(|h| self.groups.get(h).is_none_or(|g| g.may_read(reader)));
        readable
            && (!crate::protocol::nip29::is_relay_state(event.kind)
                || event.tag_values("d").all(|d| self.groups.get(d).is_none_or(|g| g.may_see(reader))))
    }

    /// Every group.
    pub fn iter(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    /// How many groups there are.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The state that stored `events` make, given in the order they were stored: applied oldest
    /// first, those of one second in the order given, at `now`. An event that changes nothing
    /// when its turn comes (a join from someone already let in) is passed over, on every node
    /// alike.
    pub fn replay(relay: PubKey, mut events: Vec<Event>, now: u64) -> Groups {
        events.sort_by_key(|e| e.created_at);
        let mut groups = Groups::new(relay);
        for event in &events {
            let _ = groups.apply(event, now);
        }
        groups
    }

    /// Whether `event`, a message to a group (not a moderation event nor a request), may be
    /// stored: the group exists, takes its kind, was not told to forget it, and, restricted,
    /// hears it from a member.
    pub fn admits(&self, event: &Event) -> Result<(), GroupError> {
        let id = crate::protocol::nip29::group_of(event).ok_or(GroupError::NoGroupTag)?;
        let group = self.groups.get(id).ok_or_else(|| GroupError::NoSuchGroup(id.to_string()))?;
        if group.deleted.contains(&event.id) {
            return Err(GroupError::Deleted);
        }
        if !group.metadata.supports(event.kind) {
            return Err(GroupError::Unsupported(event.kind.0));
        }
        if group.metadata.restricted && !group.is_member(&event.pubkey) && event.pubkey != self.relay {
            return Err(GroupError::MembersOnly);
        }
        Ok(())
    }

    /// Applies `event` (addressed to a group by its `h` tag) at `now` (Unix seconds; invites
    /// expire by it): the state changes as the event asks, or nothing changes and the refusal
    /// says why. A message changes nothing; whether it may be stored is [`Groups::admits`]'.
    pub fn apply(&mut self, event: &Event, now: u64) -> Result<Effect, GroupError> {
        let (effect, update) = self.judge(event, now)?;
        if let Some(update) = update {
            self.commit(update);
        }
        Ok(effect)
    }

    /// [`Groups::apply`] without changing anything: the effect, and the change to
    /// [`Groups::commit`] once the event is stored (so no reader sees a change the store may
    /// not keep).
    pub fn judge(&self, event: &Event, now: u64) -> Result<(Effect, Option<Update>), GroupError> {
        let id = crate::protocol::nip29::group_of(event).ok_or(GroupError::NoGroupTag)?.to_string();
        let action = Action::of(event).map_err(GroupError::Malformed)?;
        let at = (event.created_at, event.id);
        if action == Action::CreateGroup {
            if self.groups.contains_key(&id) {
                return Err(GroupError::Exists(id));
            }
            let members = BTreeMap::from([(event.pubkey, vec![ADMIN.to_string()])]);
            let group = Group {
                id: id.clone(),
                metadata: Metadata::default(),
                members,
                invites: HashMap::new(),
                pending: BTreeMap::new(),
                deleted: BTreeSet::new(),
                pins: None,
                last: at,
            };
            return Ok((Effect::Changed, Some(Update { id, group: Some(group) })));
        }
        let relay = self.relay;
        let parents: HashMap<String, Option<String>> = match &action {
            Action::EditMetadata(_) => {
                self.groups.iter().map(|(k, g)| (k.clone(), g.metadata.parent.clone())).collect()
            }
            _ => HashMap::new(),
        };
        let mut group = self.groups.get(&id).ok_or_else(|| GroupError::NoSuchGroup(id.clone()))?.clone();
        if action != Action::Message && event.created_at < group.last.0 {
            return Err(GroupError::OutOfOrder(group.last.0.0));
        }
        let by = event.pubkey;
        let may = |role_ok: bool| by == relay || role_ok;
        let admin = group.has_role(&by, ADMIN);
        let moderator = admin || group.has_role(&by, MODERATOR);
        let refuse = |what: &str| Err(GroupError::NotAllowed(format!("only the group's {what}")));
        let effect = match action {
            Action::CreateGroup | Action::Message => return Ok((Effect::Nothing, None)),
            Action::PutUser { pubkey, roles, code } => {
                if !may(admin) {
                    return refuse("admins may add members or change their roles");
                }
                if let Some(invite) = code.as_ref().and_then(|c| group.invites.get_mut(c)) {
                    invite.used = invite.used.saturating_add(1);
                }
                group.pending.remove(&pubkey);
                group.members.insert(pubkey, roles);
                Effect::Changed
            }
            Action::RemoveUser(pubkey) => {
                let plain = group.members.get(&pubkey).is_none_or(Vec::is_empty);
                if !may(admin || (moderator && plain)) {
                    return refuse("admins may remove a member with a role; its moderators, plain members");
                }
                group.pending.remove(&pubkey);
                group.members.remove(&pubkey);
                Effect::Changed
            }
            Action::EditMetadata(metadata) => {
                if !may(admin) {
                    return refuse("admins may edit its metadata");
                }
                if let Some(parent) = &metadata.parent
                    && makes_cycle(&parents, &id, parent)
                {
                    return Err(GroupError::Cycle(parent.clone()));
                }
                group.metadata = metadata;
                Effect::Changed
            }
            Action::DeleteEvent(ids) => {
                if !may(moderator) {
                    return refuse("admins and moderators may delete its events");
                }
                group.deleted.extend(ids.iter().copied());
                Effect::Removed(ids)
            }
            Action::DeleteGroup => {
                if !may(admin) {
                    return refuse("admins may delete it");
                }
                return Ok((Effect::GroupDeleted, Some(Update { id, group: None })));
            }
            Action::CreateInvite(code) => {
                if !may(moderator) {
                    return refuse("admins and moderators may create invites");
                }
                let uses = event.tag_values("uses").next().and_then(|n| n.parse().ok());
                group.invites.insert(code, Invite { uses, used: 0, expires_at: event.expiration().map(|t| t.0) });
                Effect::Changed
            }
            Action::UpdatePins(pins) => {
                if !may(moderator) {
                    return refuse("admins and moderators may pin events");
                }
                group.pins = Some(pins);
                Effect::Changed
            }
            Action::Join(code) => join(&mut group, by, event.created_at, code, now)?,
            // A leave takes back a waiting request too (stored, so a replay takes it back).
            Action::Leave => {
                let withdrawn = group.pending.remove(&by).is_some();
                match (group.is_member(&by), withdrawn) {
                    (true, _) => Effect::Remove(by),
                    (false, true) => Effect::Changed,
                    (false, false) => return Err(GroupError::NotMember),
                }
            }
        };
        group.last = at;
        Ok((effect, Some(Update { id, group: Some(group) })))
    }

    /// `id`'s group at the state its stored events `before` (those dated at or before `event`)
    /// leave it in, `event` judged there, then its stored events `after` applied (each passed
    /// over if it no longer applies): where a replay of the store will put `event`, which came in
    /// dated before the group's last change. The other groups stand as they are now.
    pub fn judge_among(
        &self,
        event: &Event,
        before: &[Event],
        after: &[Event],
        now: u64,
    ) -> Result<(Effect, Option<Update>), GroupError> {
        let id = crate::protocol::nip29::group_of(event).ok_or(GroupError::NoGroupTag)?.to_string();
        let mut scratch = self.clone();
        scratch.groups.remove(&id);
        for e in before {
            let _ = scratch.apply(e, now);
        }
        let (effect, update) = scratch.judge(event, now)?;
        if let Some(update) = update {
            scratch.commit(update);
        }
        for e in after {
            let _ = scratch.apply(e, now);
        }
        let group = scratch.groups.remove(&id);
        Ok((effect, Some(Update { id, group })))
    }

    /// Makes a change [`Groups::judge`] made.
    pub fn commit(&mut self, update: Update) {
        match update.group {
            Some(group) => self.groups.insert(update.id, group),
            None => self.groups.remove(&update.id),
        };
    }
}

/// A group's entry anew, as [`Groups::judge`] made it: `None` when the group is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// The group.
    pub id: String,
    /// Its state after the change.
    pub group: Option<Group>,
}

/// A join request from `by` at `asked`.
fn join(group: &mut Group, by: PubKey, asked: Timestamp, code: Option<String>, now: u64) -> Result<Effect, GroupError> {
    if group.is_member(&by) {
        return Err(GroupError::AlreadyMember);
    }
    let good = |i: &Invite| i.uses.is_none_or(|n| i.used < n) && i.expires_at.is_none_or(|t| t > now);
    match code {
        Some(code) if group.invites.get(&code).is_some_and(good) => Ok(Effect::Admit { pubkey: by, code: Some(code) }),
        Some(_) if group.metadata.closed => Err(GroupError::BadCode),
        _ if !group.metadata.closed => Ok(Effect::Admit { pubkey: by, code: None }),
        _ => {
            group.pending.insert(by, asked);
            Ok(Effect::Pending)
        }
    }
}

/// Whether making `parent` the parent of `id` would close a cycle, given every group's parent.
fn makes_cycle(parents: &HashMap<String, Option<String>>, id: &str, parent: &str) -> bool {
    let mut at = Some(parent.to_string());
    let mut steps = 0;
    while let Some(group) = at {
        if group == id {
            return true;
        }
        steps += 1;
        if steps > parents.len() {
            return false;
        }
        at = parents.get(&group).cloned().flatten();
    }
    false
}

#[cfg(test)]
mod tests;
