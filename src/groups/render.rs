//! What the relay says of a group: the tags of its relay-signed state events.
//!
//! Owns the contents of `kind:39000` (metadata), `39001` (admins with their roles), `39002`
//! (members), `39003` (the roles hearth supports, with what each may do) and, once a 9010 came,
//! `39005` (its pinned events, in the order the 9010 gave them), each addressed by
//! `["d", <group id>]`, as [`state::Group`](super::state::Group) holds them. Signing, storing and
//! delivering them is the caller's; so the same state always renders the same tags, on every
//! node.

use super::state::{ADMIN, Group, Groups, MODERATOR};
use crate::protocol::Kind;
use crate::protocol::nip29::{ADMINS, MEMBERS, METADATA, PINS, ROLES};

/// The roles hearth supports, with what each may do (`kind:39003`).
pub const ROLE_TEXTS: [(&str, &str); 2] = [
    (
        ADMIN,
        "may do everything: edit the metadata, add and remove members and their roles, delete events, create invites, delete the group",
    ),
    (MODERATOR, "may delete events, remove members who hold no role, create invites and pin events"),
];

/// One state event's kind, tags and content.
pub type StateEvent = (Kind, Vec<Vec<String>>, String);

/// The state events of `group`, in kind order (39005 only once a 9010 set its pins); its
/// `parent` is named only when that group exists in `groups` (an unknown parent makes a root).
pub fn state_events(group: &Group, groups: &Groups) -> Vec<StateEvent> {
    let d = || vec![vec!["d".to_string(), group.id.clone()]];
    let parent_exists = group.metadata.parent.as_deref().is_some_and(|p| groups.get(p).is_some());
    let mut metadata = d();
    metadata.extend(group.metadata.to_tags(parent_exists));
    let mut admins = d();
    admins.extend(group.members.iter().filter(|(_, roles)| !roles.is_empty()).map(|(pk, roles)| {
        let mut tag = vec!["p".to_string(), pk.to_hex()];
        tag.extend(roles.iter().cloned());
        tag
    }));
    let mut members = d();
    members.extend(group.members.keys().map(|pk| vec!["p".to_string(), pk.to_hex()]));
    let mut roles = d();
    roles.extend(ROLE_TEXTS.iter().map(|(name, text)| vec!["role".to_string(), name.to_string(), text.to_string()]));
    let mut out = vec![
        (METADATA, metadata, String::new()),
        (ADMINS, admins, format!("the admins of {}", group.id)),
        (MEMBERS, members, format!("the members of {}", group.id)),
        (ROLES, roles, format!("the roles of {}", group.id)),
    ];
    if let Some(pins) = &group.pins {
        let mut tags = d();
        tags.extend(pins.iter().map(|p| p.to_tag()));
        out.push((PINS, tags, format!("the pinned events of {}", group.id)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Keys, Timestamp};

    fn ev(who: &Keys, at: u64, kind: u16, g: &str, tags: &[&[&str]]) -> crate::protocol::Event {
        let mut all = vec![vec!["h".to_string(), g.to_string()]];
        all.extend(tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect::<Vec<String>>()));
        who.sign(Timestamp(at), Kind(kind), all, "")
    }

    #[test]
    fn the_four_state_events_say_exactly_what_the_group_holds() {
        let (relay, admin, member) = (Keys::test(1), Keys::test(2), Keys::test(3));
        let mut groups = Groups::new(relay.public_key());
        groups.apply(&ev(&admin, 100, 9007, "food", &[]), 0).unwrap();
        groups.apply(&ev(&admin, 100, 9007, "pizza", &[]), 0).unwrap();
        groups.apply(&ev(&admin, 101, 9000, "pizza", &[&["p", &member.public_key().to_hex()]]), 0).unwrap();
        let tags: &[&[&str]] = &[&["name", "Pizza"], &["closed"], &["supported_kinds", "9"], &["parent", "food"]];
        groups.apply(&ev(&admin, 102, 9002, "pizza", tags), 0).unwrap();
        let [meta, admins, members, roles] =
            <[StateEvent; 4]>::try_from(state_events(groups.get("pizza").unwrap(), &groups)).unwrap();
        let strings = |tags: &[Vec<String>]| tags.iter().map(|t| t.join(" ")).collect::<Vec<_>>();
        assert_eq!(meta.0, METADATA);
        assert_eq!(strings(&meta.1), ["d pizza", "name Pizza", "closed", "supported_kinds 9", "parent food"]);
        assert_eq!(strings(&admins.1), ["d pizza".to_string(), format!("p {} admin", admin.public_key().to_hex())]);
        let mut want = vec![admin.public_key().to_hex(), member.public_key().to_hex()];
        want.sort();
        assert_eq!(members.1.iter().skip(1).map(|t| t[1].clone()).collect::<Vec<_>>(), want);
        assert_eq!((roles.0, roles.1.len()), (ROLES, 3));
        assert_eq!(roles.1[1][..2], ["role".to_string(), "admin".to_string()]);
        // A moderator's 9010 pins an event and an address, in its order: a fifth event, 39005.
        let note = "ab".repeat(32);
        let address = format!("30023:{}:recipes", admin.public_key().to_hex());
        groups
            .apply(&ev(&admin, 103, 9000, "pizza", &[&["p", &member.public_key().to_hex(), "moderator"]]), 0)
            .unwrap();
        groups.apply(&ev(&member, 104, 9010, "pizza", &[&["a", &address], &["e", &note]]), 0).unwrap();
        let events = state_events(groups.get("pizza").unwrap(), &groups);
        assert_eq!(events.len(), 5);
        assert_eq!(
            (events[4].0, strings(&events[4].1)),
            (PINS, vec!["d pizza".to_string(), format!("a {address}"), format!("e {note}")])
        );
        // Its parent deleted, the group is a root.
        groups.apply(&ev(&admin, 105, 9008, "food", &[]), 0).unwrap();
        let events = state_events(groups.get("pizza").unwrap(), &groups);
        assert!(!events[0].1.iter().any(|t| t[0] == "parent"));
    }
}
