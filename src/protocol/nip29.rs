//! NIP-29 relay-based groups: the kinds, what a user's group event asks for, and a group's
//! metadata, as typed values.
//!
//! Owns reading an event addressed to a group (its `h` tag) into an [`Action`]: the moderation
//! events 9000–9010 with their arguments (the pin list's as [`Pin`]s), the join (9021) and leave
//! (9022) requests, or an ordinary message; and [`Metadata`], the fields of `kind:39000` that
//! `edit-metadata` (9002) replaces as a whole. Nothing here decides whether an action is allowed: that is the group
//! state's (`groups::state`), which folds these actions in order.

use super::event::{Event, EventId, Kind, PubKey, tag_values};

/// `put-user`: `p` with a pubkey and optional roles; also changes an existing member's roles.
pub const PUT_USER: Kind = Kind(9000);
/// `remove-user`: `p` with a pubkey.
pub const REMOVE_USER: Kind = Kind(9001);
/// `edit-metadata`: every field of the group's metadata.
pub const EDIT_METADATA: Kind = Kind(9002);
/// `delete-event`: `e` with the id of an event of the group.
pub const DELETE_EVENT: Kind = Kind(9005);
/// `create-group`.
pub const CREATE_GROUP: Kind = Kind(9007);
/// `delete-group`.
pub const DELETE_GROUP: Kind = Kind(9008);
/// `create-invite`: an arbitrary `code`.
pub const CREATE_INVITE: Kind = Kind(9009);
/// `update-pin-list`: the group's whole pin list, as `e` (event id) and `a` (address) tags.
pub const UPDATE_PINS: Kind = Kind(9010);
/// A join request (`code` optional).
pub const JOIN: Kind = Kind(9021);
/// A leave request.
pub const LEAVE: Kind = Kind(9022);
/// The relay-signed state events, addressed by the group id in `d`: metadata, admins, members,
/// roles.
pub const METADATA: Kind = Kind(39000);
/// The group's admins, each with its roles.
pub const ADMINS: Kind = Kind(39001);
/// The group's members.
pub const MEMBERS: Kind = Kind(39002);
/// The roles the relay supports.
pub const ROLES: Kind = Kind(39003);
/// The group's pinned events, as its last 9010 named them.
pub const PINS: Kind = Kind(39005);

/// True for the kinds only the relay's own key signs (39000–39009).
pub fn is_relay_state(kind: Kind) -> bool {
    (39000..=39009).contains(&kind.0)
}

/// True for the moderation kinds (9000–9020), which change a group's state.
pub fn is_moderation(kind: Kind) -> bool {
    (9000..=9020).contains(&kind.0)
}

/// The group an event is addressed to: the first value of its first `h` tag.
pub fn group_of(event: &Event) -> Option<&str> {
    event.tag_values("h").next()
}

/// How the relay shows a group (`kind:39000`), as `edit-metadata` sets it: every field at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Display name.
    pub name: String,
    /// Picture URL.
    pub picture: String,
    /// Banner picture URL.
    pub banner: String,
    /// Description.
    pub about: String,
    /// Only members read its events.
    pub private: bool,
    /// Only members write to it.
    pub restricted: bool,
    /// Its metadata is shown only to members.
    pub hidden: bool,
    /// A join request needs an invite code.
    pub closed: bool,
    /// The kinds it accepts; `None`: every kind. An empty list accepts none.
    pub supported_kinds: Option<Vec<Kind>>,
    /// The group it is a subgroup of; `None` (or empty) makes it a root.
    pub parent: Option<String>,
}

impl Metadata {
    /// The metadata an `edit-metadata` event (or a `kind:39000`) carries in its tags. Fields it
    /// leaves out are empty or off, as NIP-29's "all the fields" says; kinds that are not numbers
    /// are refused.
    pub fn from_tags(tags: &[Vec<String>]) -> Result<Metadata, String> {
        let text = |name: &str| tag_values(tags, name).next().unwrap_or("").to_string();
        let flag = |name: &str| tags.iter().any(|t| t.first().is_some_and(|n| n == name));
        let supported_kinds = match tags.iter().find(|t| t.first().is_some_and(|n| n == "supported_kinds")) {
            None => None,
            Some(tag) => Some(
                tag[1..]
                    .iter()
                    .map(|k| k.parse::<u16>().map(Kind).map_err(|_| format!("supported_kinds: `{k}` is not a kind")))
                    .collect::<Result<Vec<Kind>, String>>()?,
            ),
        };
        let parent = tag_values(tags, "parent").next().filter(|p| !p.is_empty()).map(str::to_string);
        Ok(Metadata {
            name: text("name"),
            picture: text("picture"),
            banner: text("banner"),
            about: text("about"),
            private: flag("private"),
            restricted: flag("restricted"),
            hidden: flag("hidden"),
            closed: flag("closed"),
            supported_kinds,
            parent,
        })
    }

    /// The tags of its `kind:39000` after `["d", id]`; `parent` only when it names a group that
    /// exists (`parent_exists`), since an unknown parent makes a root.
    pub fn to_tags(&self, parent_exists: bool) -> Vec<Vec<String>> {
        let mut tags = Vec::new();
        for (name, value) in
            [("name", &self.name), ("picture", &self.picture), ("banner", &self.banner), ("about", &self.about)]
        {
            if !value.is_empty() {
                tags.push(vec![name.to_string(), value.clone()]);
            }
        }
        for (name, on) in [
            ("private", self.private),
            ("restricted", self.restricted),
            ("hidden", self.hidden),
            ("closed", self.closed),
        ] {
            if on {
                tags.push(vec![name.to_string()]);
            }
        }
        if let Some(kinds) = &self.supported_kinds {
            let mut tag = vec!["supported_kinds".to_string()];
            tag.extend(kinds.iter().map(|k| k.0.to_string()));
            tags.push(tag);
        }
        if let (Some(parent), true) = (&self.parent, parent_exists) {
            tags.push(vec!["parent".to_string(), parent.clone()]);
        }
        tags
    }

    /// Whether the group takes events of `kind` (its `supported_kinds`, when it has one).
    pub fn supports(&self, kind: Kind) -> bool {
        self.supported_kinds.as_ref().is_none_or(|kinds| kinds.contains(&kind))
    }
}

/// One pinned event of a group: by id (`e`) or, a replaceable one, by address (`a`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// `["e", <id>]`.
    Event(EventId),
    /// `["a", "<kind>:<pubkey>:<d>"]`.
    Address(String),
}

impl Pin {
    /// The pins a 9010 names, in its order: every `e` and `a` tag; a malformed one is refused.
    pub fn from_tags(tags: &[Vec<String>]) -> Result<Vec<Pin>, String> {
        let mut pins = Vec::new();
        for tag in tags {
            match (tag.first().map(String::as_str), tag.get(1)) {
                (Some("e"), Some(hex)) => {
                    pins.push(Pin::Event(EventId::from_hex(hex).ok_or_else(|| format!("`{hex}` is not an event id"))?))
                }
                (Some("a"), Some(address)) => {
                    let mut parts = address.splitn(3, ':');
                    let kind = parts.next().and_then(|k| k.parse::<u16>().ok());
                    let author = parts.next().and_then(PubKey::from_hex);
                    if kind.is_none() || author.is_none() || parts.next().is_none() {
                        return Err(format!("`{address}` is not an address: write it as <kind>:<pubkey hex>:<d>"));
                    }
                    pins.push(Pin::Address(address.clone()));
                }
                _ => {}
            }
        }
        Ok(pins)
    }

    /// Its tag, as the relay's 39005 names it.
    pub fn to_tag(&self) -> Vec<String> {
        match self {
            Pin::Event(id) => vec!["e".to_string(), id.to_hex()],
            Pin::Address(address) => vec!["a".to_string(), address.clone()],
        }
    }
}

/// What an event addressed to a group asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// 9000: make `pubkey` a member with `roles` (an existing member's roles are replaced).
    PutUser {
        /// Who.
        pubkey: PubKey,
        /// Its roles (none: a plain member).
        roles: Vec<String>,
        /// The invite code a join used, on the relay's own 9000 answering it.
        code: Option<String>,
    },
    /// 9001: `pubkey` is a member no more.
    RemoveUser(PubKey),
    /// 9002: the whole metadata anew.
    EditMetadata(Metadata),
    /// 9005: these events of the group are gone.
    DeleteEvent(Vec<EventId>),
    /// 9007.
    CreateGroup,
    /// 9008: the group and its events are gone.
    DeleteGroup,
    /// 9009: a join with this code is let in.
    CreateInvite(String),
    /// 9010: the group's pinned events, the whole list anew (none: nothing pinned).
    UpdatePins(Vec<Pin>),
    /// 9021, with the invite code it names.
    Join(Option<String>),
    /// 9022.
    Leave,
    /// Any other kind: a message to the group.
    Message,
}

impl Action {
    /// What `event` asks of its group; `Err` says what is malformed.
    pub fn of(event: &Event) -> Result<Action, String> {
        let pubkey = || {
            let hex = event.tag_values("p").next().ok_or("a `p` tag with the member's pubkey is missing")?;
            PubKey::from_hex(hex).ok_or_else(|| format!("`{hex}` is not a pubkey"))
        };
        Ok(match event.kind {
            PUT_USER => {
                let tag = event.tags.iter().find(|t| t.first().is_some_and(|n| n == "p"));
                let roles =
                    tag.map(|t| t.iter().skip(2).filter(|r| !r.is_empty()).cloned().collect()).unwrap_or_default();
                let code = event.tag_values("code").next().map(str::to_string);
                Action::PutUser { pubkey: pubkey()?, roles, code }
            }
            REMOVE_USER => Action::RemoveUser(pubkey()?),
            EDIT_METADATA => Action::EditMetadata(Metadata::from_tags(&event.tags)?),
            DELETE_EVENT => {
                let ids = event
                    .tag_values("e")
                    .map(|hex| EventId::from_hex(hex).ok_or_else(|| format!("`{hex}` is not an event id")))
                    .collect::<Result<Vec<EventId>, String>>()?;
                if ids.is_empty() {
                    return Err("an `e` tag with the id of the event to delete is missing".into());
                }
                Action::DeleteEvent(ids)
            }
            CREATE_GROUP => Action::CreateGroup,
            DELETE_GROUP => Action::DeleteGroup,
            CREATE_INVITE => match event.tag_values("code").next().filter(|c| !c.is_empty()) {
                Some(code) => Action::CreateInvite(code.to_string()),
                None => return Err("a `code` tag with the invite code is missing".into()),
            },
            UPDATE_PINS => Action::UpdatePins(Pin::from_tags(&event.tags)?),
            JOIN => Action::Join(event.tag_values("code").next().filter(|c| !c.is_empty()).map(str::to_string)),
            LEAVE => Action::Leave,
            kind if is_moderation(kind) => {
                return Err(format!("kind {} is not a moderation action hearth knows", kind.0));
            }
            _ => Action::Message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Keys, Timestamp};

    fn event(kind: u16, tags: &[&[&str]]) -> Event {
        let tags = tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect()).collect();
        Keys::test(3).sign(Timestamp(1), Kind(kind), tags, "")
    }

    #[test]
    fn metadata_is_read_whole_and_written_back_as_nip29_shows_it() {
        let tags: Vec<Vec<String>> = [
            vec!["h", "g"],
            vec!["name", "Pizza Lovers"],
            vec!["about", "pizza"],
            vec!["private"],
            vec!["closed"],
            vec!["supported_kinds", "9", "11"],
            vec!["parent", "food"],
        ]
        .iter()
        .map(|t| t.iter().map(|s| s.to_string()).collect())
        .collect();
        let m = Metadata::from_tags(&tags).unwrap();
        assert_eq!(
            (m.name.as_str(), m.picture.as_str(), m.private, m.restricted, m.closed),
            ("Pizza Lovers", "", true, false, true)
        );
        assert_eq!(m.supported_kinds, Some(vec![Kind(9), Kind(11)]));
        assert!(m.supports(Kind(9)) && !m.supports(Kind(1)));
        let out = m.to_tags(true);
        assert_eq!(Metadata::from_tags(&out).unwrap(), m);
        // An unknown parent makes a root; an empty supported_kinds supports nothing.
        assert!(!m.to_tags(false).iter().any(|t| t[0] == "parent"));
        let none = Metadata::from_tags(&[vec!["supported_kinds".to_string()]]).unwrap();
        assert!(!none.supports(Kind(9)));
        assert!(Metadata::default().supports(Kind(9)));
        assert!(Metadata::from_tags(&[vec!["supported_kinds".into(), "nine".into()]]).is_err());
        assert_eq!(Metadata::from_tags(&[vec!["parent".into(), String::new()]]).unwrap().parent, None);
    }

    #[test]
    fn each_moderation_kind_reads_its_arguments_and_refuses_what_is_missing() {
        let pk = Keys::test(4).public_key().to_hex();
        let put = Action::of(&event(9000, &[&["h", "g"], &["p", &pk, "admin", "moderator"]])).unwrap();
        assert!(matches!(put, Action::PutUser { roles, code: None, .. } if roles == ["admin", "moderator"]));
        assert!(matches!(Action::of(&event(9001, &[&["h", "g"], &["p", &pk]])).unwrap(), Action::RemoveUser(_)));
        assert!(Action::of(&event(9001, &[&["h", "g"]])).unwrap_err().contains("`p` tag"));
        assert!(Action::of(&event(9000, &[&["h", "g"], &["p", "zz"]])).unwrap_err().contains("not a pubkey"));
        assert!(Action::of(&event(9005, &[&["h", "g"]])).unwrap_err().contains("`e` tag"));
        assert!(Action::of(&event(9009, &[&["h", "g"]])).unwrap_err().contains("`code` tag"));
        assert_eq!(
            Action::of(&event(9009, &[&["h", "g"], &["code", "c1"]])).unwrap(),
            Action::CreateInvite("c1".into())
        );
        assert_eq!(Action::of(&event(9021, &[&["h", "g"], &["code", "c1"]])).unwrap(), Action::Join(Some("c1".into())));
        assert_eq!(Action::of(&event(9021, &[&["h", "g"]])).unwrap(), Action::Join(None));
        assert_eq!(Action::of(&event(9022, &[&["h", "g"]])).unwrap(), Action::Leave);
        assert_eq!(Action::of(&event(9, &[&["h", "g"]])).unwrap(), Action::Message);
        assert!(Action::of(&event(9003, &[&["h", "g"]])).unwrap_err().contains("9003"));
        assert_eq!(group_of(&event(9, &[&["h", "g"]])), Some("g"));
        assert!(is_relay_state(Kind(39003)) && !is_relay_state(Kind(30000)));
    }
}
