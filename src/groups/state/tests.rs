//! The group fold: every rule, and a replay of the stored events arriving at the live state.

use super::*;
use crate::protocol::nip29::Pin;
use crate::protocol::{Keys, Kind};

fn relay() -> Keys {
    Keys::test(200)
}

/// `who` signs a `kind` event at `at` for group `g` with `tags` after its `h`.
fn ev(who: &Keys, at: u64, kind: u16, g: &str, tags: &[&[&str]]) -> Event {
    let mut all = vec![vec!["h".to_string(), g.to_string()]];
    all.extend(tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect::<Vec<String>>()));
    who.sign(Timestamp(at), Kind(kind), all, "")
}

fn hex(k: &Keys) -> String {
    k.public_key().to_hex()
}

/// Groups with `g` created by `Keys::test(1)` at 100.
fn with_group(g: &str) -> Groups {
    let mut groups = Groups::new(relay().public_key());
    assert_eq!(groups.apply(&ev(&Keys::test(1), 100, 9007, g, &[]), 0), Ok(Effect::Changed));
    groups
}

#[test]
fn the_creator_is_the_admin_and_a_second_create_is_a_duplicate() {
    let mut groups = with_group("g");
    let group = groups.get("g").unwrap();
    assert!(group.has_role(&Keys::test(1).public_key(), ADMIN));
    assert_eq!(group.metadata, Metadata::default());
    assert_eq!(groups.apply(&ev(&Keys::test(2), 101, 9007, "g", &[]), 0), Err(GroupError::Exists("g".into())));
    assert_eq!(groups.apply(&ev(&Keys::test(2), 101, 9, "nope", &[]), 0), Err(GroupError::NoSuchGroup("nope".into())));
    let untagged = Keys::test(2).sign(Timestamp(101), Kind(9), vec![], "");
    assert_eq!(groups.apply(&untagged, 0), Err(GroupError::NoGroupTag));
}

#[test]
fn roles_decide_who_may_do_what_and_the_relay_may_do_anything() {
    let mut groups = with_group("g");
    let (admin, moderator, member, stranger) = (Keys::test(1), Keys::test(2), Keys::test(3), Keys::test(4));
    // A stranger and a plain member may not moderate.
    for who in [&stranger, &member] {
        let refused = groups.apply(&ev(who, 101, 9000, "g", &[&["p", &hex(who), "admin"]]), 0);
        assert!(matches!(refused, Err(GroupError::NotAllowed(_))), "{refused:?}");
    }
    groups.apply(&ev(&admin, 101, 9000, "g", &[&["p", &hex(&moderator), "moderator"]]), 0).unwrap();
    groups.apply(&ev(&admin, 102, 9000, "g", &[&["p", &hex(&member)]]), 0).unwrap();
    // A moderator deletes events, creates invites and removes plain members, nothing more.
    let target = EventId([7; 32]);
    assert_eq!(
        groups.apply(&ev(&moderator, 103, 9005, "g", &[&["e", &target.to_hex()]]), 0),
        Ok(Effect::Removed(vec![target]))
    );
    assert!(groups.get("g").unwrap().deleted.contains(&target));
    assert_eq!(groups.apply(&ev(&moderator, 104, 9009, "g", &[&["code", "c"]]), 0), Ok(Effect::Changed));
    assert!(matches!(
        groups.apply(&ev(&moderator, 105, 9001, "g", &[&["p", &hex(&admin)]]), 0),
        Err(GroupError::NotAllowed(_))
    ));
    assert!(matches!(
        groups.apply(&ev(&moderator, 105, 9002, "g", &[&["name", "x"]]), 0),
        Err(GroupError::NotAllowed(_))
    ));
    assert!(matches!(groups.apply(&ev(&moderator, 105, 9008, "g", &[]), 0), Err(GroupError::NotAllowed(_))));
    assert_eq!(groups.apply(&ev(&moderator, 105, 9001, "g", &[&["p", &hex(&member)]]), 0), Ok(Effect::Changed));
    assert!(!groups.get("g").unwrap().is_member(&member.public_key()));
    // The relay's key may do anything, a member's roles are replaced by a new 9000.
    groups.apply(&ev(&relay(), 106, 9000, "g", &[&["p", &hex(&moderator), "admin"]]), 0).unwrap();
    assert_eq!(groups.get("g").unwrap().members[&moderator.public_key()], vec!["admin".to_string()]);
    assert_eq!(groups.apply(&ev(&moderator, 107, 9008, "g", &[]), 0), Ok(Effect::GroupDeleted));
    assert!(groups.get("g").is_none());
}

#[test]
fn a_change_dated_before_the_last_one_is_refused_and_one_of_the_same_second_comes_after_it() {
    let mut groups = with_group("g");
    let admin = Keys::test(1);
    groups.apply(&ev(&admin, 110, 9002, "g", &[&["name", "Later"]]), 0).unwrap();
    let earlier = ev(&admin, 109, 9002, "g", &[&["name", "Earlier"]]);
    assert_eq!(groups.apply(&earlier, 0), Err(GroupError::OutOfOrder(110)));
    assert_eq!(groups.get("g").unwrap().metadata.name, "Later");
    // The same second is the order they came in, whatever their ids.
    groups.apply(&ev(&admin, 110, 9002, "g", &[&["name", "Same second"]]), 0).unwrap();
    assert_eq!(groups.get("g").unwrap().metadata.name, "Same second");
    // A message is no change: its date is not held to the last change's.
    assert_eq!(groups.apply(&ev(&Keys::test(5), 50, 9, "g", &[]), 0), Ok(Effect::Nothing));
}

#[test]
fn joins_of_open_and_closed_groups_with_and_without_codes() {
    let mut groups = with_group("g");
    let (admin, alice, bob, carol) = (Keys::test(1), Keys::test(2), Keys::test(3), Keys::test(4));
    // Open: let in at once (the relay signs the 9000).
    assert_eq!(
        groups.apply(&ev(&alice, 101, 9021, "g", &[]), 0),
        Ok(Effect::Admit { pubkey: alice.public_key(), code: None })
    );
    groups.apply(&ev(&relay(), 101, 9000, "g", &[&["p", &hex(&alice)]]), 0).unwrap();
    assert_eq!(groups.apply(&ev(&alice, 102, 9021, "g", &[]), 0), Err(GroupError::AlreadyMember));
    // Closed: a code of one use lets one in; a bad code is final; none waits for an admin.
    groups.apply(&ev(&admin, 103, 9002, "g", &[&["closed"]]), 0).unwrap();
    groups.apply(&ev(&admin, 104, 9009, "g", &[&["code", "once"], &["uses", "1"]]), 0).unwrap();
    assert_eq!(
        groups.apply(&ev(&bob, 105, 9021, "g", &[&["code", "once"]]), 0),
        Ok(Effect::Admit { pubkey: bob.public_key(), code: Some("once".into()) })
    );
    groups.apply(&ev(&relay(), 105, 9000, "g", &[&["p", &hex(&bob)], &["code", "once"]]), 0).unwrap();
    assert_eq!(groups.apply(&ev(&carol, 106, 9021, "g", &[&["code", "once"]]), 0), Err(GroupError::BadCode));
    assert_eq!(groups.apply(&ev(&carol, 106, 9021, "g", &[]), 0), Ok(Effect::Pending));
    assert_eq!(groups.get("g").unwrap().pending.keys().collect::<Vec<_>>(), vec![&carol.public_key()]);
    // An admin's 9000 lets the waiting one in, and the request is no longer waiting.
    groups.apply(&ev(&admin, 107, 9000, "g", &[&["p", &hex(&carol)]]), 0).unwrap();
    assert!(groups.get("g").unwrap().pending.is_empty());
    // An expired code lets no one in.
    groups.apply(&ev(&admin, 108, 9009, "g", &[&["code", "soon"], &["expiration", "500"]]), 0).unwrap();
    assert_eq!(groups.apply(&ev(&Keys::test(9), 109, 9021, "g", &[&["code", "soon"]]), 499).map(|_| ()), Ok(()));
    assert_eq!(groups.apply(&ev(&Keys::test(9), 109, 9021, "g", &[&["code", "soon"]]), 500), Err(GroupError::BadCode));
}

#[test]
fn a_leave_removes_a_member_or_withdraws_a_request_and_is_refused_otherwise() {
    let mut groups = with_group("g");
    let (admin, alice, bob) = (Keys::test(1), Keys::test(2), Keys::test(3));
    groups.apply(&ev(&admin, 101, 9000, "g", &[&["p", &hex(&alice)]]), 0).unwrap();
    assert_eq!(groups.apply(&ev(&alice, 102, 9022, "g", &[]), 0), Ok(Effect::Remove(alice.public_key())));
    groups.apply(&ev(&admin, 103, 9002, "g", &[&["closed"]]), 0).unwrap();
    assert_eq!(groups.apply(&ev(&bob, 104, 9021, "g", &[]), 0), Ok(Effect::Pending));
    assert_eq!(groups.apply(&ev(&bob, 105, 9022, "g", &[]), 0), Ok(Effect::Changed));
    assert!(groups.get("g").unwrap().pending.is_empty());
    assert_eq!(groups.apply(&ev(&bob, 106, 9022, "g", &[]), 0), Err(GroupError::NotMember));
}

#[test]
fn a_parent_that_would_close_a_cycle_is_refused_an_unknown_one_is_kept() {
    let mut groups = with_group("a");
    let admin = Keys::test(1);
    groups.apply(&ev(&admin, 100, 9007, "b", &[]), 0).unwrap();
    groups.apply(&ev(&admin, 100, 9007, "c", &[]), 0).unwrap();
    groups.apply(&ev(&admin, 101, 9002, "b", &[&["parent", "a"]]), 0).unwrap();
    groups.apply(&ev(&admin, 101, 9002, "c", &[&["parent", "b"]]), 0).unwrap();
    assert_eq!(groups.apply(&ev(&admin, 102, 9002, "a", &[&["parent", "c"]]), 0), Err(GroupError::Cycle("c".into())));
    assert_eq!(groups.apply(&ev(&admin, 102, 9002, "a", &[&["parent", "a"]]), 0), Err(GroupError::Cycle("a".into())));
    groups.apply(&ev(&admin, 103, 9002, "a", &[&["parent", "elsewhere"]]), 0).unwrap();
    assert_eq!(groups.get("a").unwrap().metadata.parent.as_deref(), Some("elsewhere"));
}

#[test]
fn private_and_hidden_groups_show_their_events_and_metadata_to_members_only() {
    let mut groups = with_group("g");
    let (admin, stranger) = (Keys::test(1), Keys::test(6));
    let group = groups.get("g").unwrap();
    assert!(group.may_read(None) && group.may_see(None));
    groups.apply(&ev(&admin, 101, 9002, "g", &[&["private"], &["hidden"]]), 0).unwrap();
    let group = groups.get("g").unwrap();
    assert!(!group.may_read(None) && !group.may_read(Some(&stranger.public_key())));
    assert!(!group.may_see(Some(&stranger.public_key())));
    assert!(group.may_read(Some(&admin.public_key())) && group.may_see(Some(&admin.public_key())));
}

#[test]
fn replaying_the_accepted_events_in_canonical_order_arrives_at_the_live_state() {
    // A day of a group, in arrival order; what was refused is not stored, so not replayed.
    let (admin, moderator, alice, bob, carol) =
        (Keys::test(1), Keys::test(2), Keys::test(3), Keys::test(4), Keys::test(5));
    let script = vec![
        ev(&admin, 100, 9007, "g", &[]),
        ev(&admin, 101, 9000, "g", &[&["p", &hex(&moderator), "moderator"]]),
        ev(&alice, 101, 9021, "g", &[]),
        ev(&relay(), 102, 9000, "g", &[&["p", &hex(&alice)]]),
        ev(&admin, 103, 9002, "g", &[&["name", "G"], &["closed"], &["private"]]),
        ev(&moderator, 104, 9009, "g", &[&["code", "c"], &["uses", "2"]]),
        ev(&bob, 105, 9021, "g", &[&["code", "c"]]),
        ev(&relay(), 105, 9000, "g", &[&["p", &hex(&bob)], &["code", "c"]]),
        ev(&carol, 106, 9021, "g", &[]),
        ev(&moderator, 107, 9005, "g", &[&["e", &EventId([9; 32]).to_hex()]]),
        ev(&alice, 108, 9022, "g", &[]),
        ev(&relay(), 108, 9001, "g", &[&["p", &hex(&alice)]]),
        ev(&admin, 100, 9007, "h", &[]),
        ev(&admin, 109, 9002, "h", &[&["parent", "g"]]),
        ev(&admin, 110, 9, "g", &[]),
    ];
    let mut live = Groups::new(relay().public_key());
    let mut stored = Vec::new();
    for event in &script {
        if live.apply(event, 0).is_ok() {
            stored.push(event.clone());
        }
    }
    assert_eq!(stored.len(), script.len(), "every step of the script is accepted");
    // In the order they were stored, a later second moved first: the replay sorts by time and
    // keeps the stored order within a second.
    let late = stored.remove(stored.len() - 1);
    stored.insert(0, late);
    let replayed = Groups::replay(relay().public_key(), stored, 0);
    let mut ids: Vec<&String> = live.groups.keys().collect();
    ids.sort();
    for id in ids {
        assert_eq!(replayed.get(id), live.get(id), "{id}");
    }
    let g = live.get("g").unwrap();
    assert_eq!(g.members.len(), 3, "admin, moderator, bob");
    assert_eq!(g.invites["c"].used, 1);
    assert_eq!(g.pending.keys().collect::<Vec<_>>(), vec![&carol.public_key()]);
}

#[test]
fn a_message_needs_the_group_its_kinds_and_when_restricted_a_member() {
    let mut groups = with_group("g");
    let (admin, stranger) = (Keys::test(1), Keys::test(7));
    let hello = ev(&stranger, 101, 9, "g", &[]);
    assert_eq!(groups.admits(&hello), Ok(()));
    assert_eq!(groups.admits(&ev(&stranger, 101, 9, "none", &[])), Err(GroupError::NoSuchGroup("none".into())));
    groups.apply(&ev(&admin, 102, 9002, "g", &[&["restricted"], &["supported_kinds", "9", "11"]]), 0).unwrap();
    assert_eq!(groups.admits(&hello), Err(GroupError::MembersOnly));
    assert_eq!(groups.admits(&ev(&admin, 103, 9, "g", &[])), Ok(()));
    assert_eq!(groups.admits(&ev(&admin, 103, 1, "g", &[])), Err(GroupError::Unsupported(1)));
    let said = ev(&admin, 104, 11, "g", &[]);
    groups.apply(&ev(&admin, 105, 9005, "g", &[&["e", &said.id.to_hex()]]), 0).unwrap();
    assert_eq!(groups.admits(&said), Err(GroupError::Deleted));
}

#[test]
fn an_event_dated_before_the_last_change_is_judged_where_the_replay_puts_it() {
    let mut groups = with_group("g");
    let (admin, alice) = (Keys::test(1), Keys::test(2));
    let create = ev(&admin, 100, 9007, "g", &[]);
    let later = ev(&admin, 110, 9002, "g", &[&["name", "Later"], &["closed"]]);
    groups.apply(&later, 0).unwrap();
    // An edit dated earlier: in its place, then the later one over it.
    let earlier = ev(&admin, 105, 9002, "g", &[&["name", "Earlier"], &["about", "first"]]);
    assert_eq!(groups.judge(&earlier, 0).unwrap_err(), GroupError::OutOfOrder(110));
    let (effect, update) =
        groups.judge_among(&earlier, std::slice::from_ref(&create), std::slice::from_ref(&later), 0).unwrap();
    assert_eq!(effect, Effect::Changed);
    groups.commit(update.unwrap());
    assert_eq!(
        (groups.get("g").unwrap().metadata.name.as_str(), groups.get("g").unwrap().metadata.about.as_str()),
        ("Later", "")
    );
    // A join dated before the group was closed is let in where it stands: an open group then.
    let join = ev(&alice, 106, 9021, "g", &[]);
    let (effect, _) =
        groups.judge_among(&join, &[create.clone(), earlier.clone()], std::slice::from_ref(&later), 0).unwrap();
    assert_eq!(effect, Effect::Admit { pubkey: alice.public_key(), code: None });
    // And the whole history folds to the same state.
    let replayed = Groups::replay(relay().public_key(), vec![create, later, earlier], 0);
    let folded = groups.get("g").expect("the group was created");
    assert_eq!(replayed.get("g"), Some(folded));
}

#[test]
fn moderators_pin_the_whole_list_anew_and_others_may_not() {
    let mut groups = with_group("g");
    let (admin, moderator, member) = (Keys::test(1), Keys::test(2), Keys::test(3));
    groups.apply(&ev(&admin, 101, 9000, "g", &[&["p", &hex(&moderator), "moderator"]]), 0).unwrap();
    groups.apply(&ev(&admin, 102, 9000, "g", &[&["p", &hex(&member)]]), 0).unwrap();
    assert_eq!(groups.get("g").unwrap().pins, None);
    let (one, two) = (EventId([7; 32]), EventId([8; 32]));
    let pin = ev(&moderator, 103, 9010, "g", &[&["e", &one.to_hex()], &["e", &two.to_hex()]]);
    assert_eq!(groups.apply(&pin, 0), Ok(Effect::Changed));
    assert_eq!(groups.get("g").unwrap().pins, Some(vec![Pin::Event(one), Pin::Event(two)]));
    // A plain member's list is refused and changes nothing.
    let refused = groups.apply(&ev(&member, 104, 9010, "g", &[&["e", &one.to_hex()]]), 0);
    assert_eq!(refused, Err(GroupError::NotAllowed("only the group's admins and moderators may pin events".into())));
    // A malformed address is refused with what to write instead.
    let bad = groups.apply(&ev(&admin, 104, 9010, "g", &[&["a", "30023:nothex:x"]]), 0);
    assert_eq!(
        bad,
        Err(GroupError::Malformed("`30023:nothex:x` is not an address: write it as <kind>:<pubkey hex>:<d>".into()))
    );
    // The admin's empty list unpins everything; a replay of the same events arrives there too.
    let unpin = ev(&admin, 105, 9010, "g", &[]);
    groups.apply(&unpin, 0).unwrap();
    assert_eq!(groups.get("g").unwrap().pins, Some(vec![]));
    let stored = vec![
        ev(&Keys::test(1), 100, 9007, "g", &[]),
        ev(&admin, 101, 9000, "g", &[&["p", &hex(&moderator), "moderator"]]),
        pin,
        unpin,
    ];
    assert_eq!(Groups::replay(relay().public_key(), stored.clone(), 0).get("g").unwrap().pins, Some(vec![]));
    let pinned = Groups::replay(relay().public_key(), stored[..3].to_vec(), 0);
    assert_eq!(pinned.get("g").unwrap().pins, Some(vec![Pin::Event(one), Pin::Event(two)]));
}
