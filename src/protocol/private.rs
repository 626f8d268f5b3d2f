//! NIP-42 read restrictions: which stored or live events a reader may be served.
//!
//! Owns the rule of `auth.private_kinds`: an event of a private kind (by default 4, NIP-04
//! direct messages, and 1059, NIP-59 gift wraps) is served only to a reader authenticated as its
//! author or as a pubkey one of its `p` tags names; every other event to anyone. And the
//! reader's [`GroupScreen`] (NIP-29): the events of the private groups it is not a member of
//! (their `h` tag) and the state events of the hidden ones (their `d` tag) are not served to it. Pure, so that
//! every read path (a REQ's stored answer and its live events, COUNT, REST, the frame log of
//! `hearth dev`) asks the same [`Viewer`] and none of them can drift from the others.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use super::event::{EventId, Kind, PubKey, tag_values};
use super::filter::Filter;

/// NIP-17's ephemeral gift wrap: delivered live to its recipient, never stored.
pub const EPHEMERAL_GIFT_WRAP: Kind = Kind(21059);

/// True for a gift wrap, stored (1059) or ephemeral (21059).
pub fn is_gift_wrap(kind: Kind) -> bool {
    kind == Kind::GIFT_WRAP || kind == EPHEMERAL_GIFT_WRAP
}

/// The one recipient of a gift wrap (NIP-59: exactly one `p` tag); `None` for any other event
/// or a wrap that names none or several. The recipient may delete a stored wrap (NIP-09) in
/// place of its author, a key thrown away after signing it.
pub fn wrap_recipient(tags: &[Vec<String>], kind: Kind) -> Option<PubKey> {
    if !is_gift_wrap(kind) {
        return None;
    }
    only_p(tags)
}

/// NIP-57's zap receipt, published by the recipient's zap service (which never authenticates).
pub const ZAP_RECEIPT: Kind = Kind(9735);

/// The one recipient of members' mail from outside: a gift wrap's or a zap receipt's single `p`
/// tag; `None` for any other event, or one that names none or several. On a relay that only
/// members write to, such an event to a member is taken from anyone (as zooid does): without it
/// zaps and direct messages to the members of an allow-listed relay break.
pub fn mail_recipient(tags: &[Vec<String>], kind: Kind) -> Option<PubKey> {
    match kind == ZAP_RECEIPT || is_gift_wrap(kind) {
        true => only_p(tags),
        false => None,
    }
}

/// The value of the event's only `p` tag.
fn only_p(tags: &[Vec<String>]) -> Option<PubKey> {
    let mut ps = tag_values(tags, "p");
    let first = ps.next().and_then(PubKey::from_hex)?;
    ps.next().is_none().then_some(first)
}

/// NIP-56 reports: served only to their author and the relay's admins (a report names who
/// reported whom; the reported key is in its `p` tag and must not read it).
pub const REPORT: Kind = Kind(1984);

/// The kinds served only to their parties (`auth.private_kinds`), sorted; and the sealed kinds
/// (reports), served only to their author and the relay's admins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrivateKinds(Arc<[Kind]>, Sealed);

/// The kinds only their author and the admins read, the admins, and the events held for review.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Sealed {
    kinds: Arc<[Kind]>,
    admins: Arc<[PubKey]>,
    held: HeldIds,
}

/// The events held for review (`moderation.hold_after_reports`): served only to their author and
/// the admins. A live handle: moderation sets it, every viewer made after reads it.
#[derive(Clone, Debug, Default)]
pub struct HeldIds(Arc<RwLock<Arc<HashSet<EventId>>>>);

impl HeldIds {
    /// Replaces the held events.
    pub fn set(&self, ids: impl IntoIterator<Item = EventId>) {
        let ids = Arc::new(ids.into_iter().collect());
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = ids;
    }

    /// The held events now.
    fn now(&self) -> Arc<HashSet<EventId>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl PartialEq for HeldIds {
    /// The same handle.
    fn eq(&self, other: &HeldIds) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for HeldIds {}

impl PrivateKinds {
    /// The private kinds `kinds` (in any order, repeats allowed).
    pub fn new(kinds: &[Kind]) -> PrivateKinds {
        let mut kinds = kinds.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        PrivateKinds(kinds.into(), Sealed::default())
    }

    /// These kinds, with reports (kind 1984) sealed: served only to their author and `admins`.
    pub fn with_reports_sealed_for(self, admins: &[PubKey]) -> PrivateKinds {
        let mut all = self.0.to_vec();
        all.push(REPORT);
        let mut private = PrivateKinds::new(&all);
        private.1 = Sealed { kinds: Arc::from([REPORT]), admins: admins.into(), held: self.1.held };
        private
    }

    /// The handle of the events held for review, which moderation keeps up to date.
    pub fn held(&self) -> &HeldIds {
        &self.1.held
    }

    /// True when events of `kind` are private (sealed ones included).
    pub fn contains(&self, kind: Kind) -> bool {
        self.0.binary_search(&kind).is_ok()
    }

    /// True when events of `kind` are sealed: their author's and the admins' only.
    pub fn sealed(&self, kind: Kind) -> bool {
        self.1.kinds.contains(&kind)
    }

    /// True when `pubkey` is one of the admins who read sealed kinds.
    pub fn is_admin(&self, pubkey: &PubKey) -> bool {
        self.1.admins.contains(pubkey)
    }

    /// True when every event `filter` can match is of a private kind: it names kinds, and only
    /// private ones. Such a request from a reader who has not authenticated can be answered with
    /// nothing at all, so it is refused `auth-required:` instead (NIP-42).
    pub fn only(&self, filter: &Filter) -> bool {
        filter.kinds.as_ref().is_some_and(|kinds| !kinds.is_empty() && kinds.iter().all(|k| self.contains(*k)))
    }

    /// The private kinds, sorted.
    pub fn kinds(&self) -> &[Kind] {
        &self.0
    }

    /// True when `filter` can match an event of a private kind.
    pub fn can_match(&self, filter: &Filter) -> bool {
        !self.0.is_empty() && filter.kinds.as_ref().is_none_or(|kinds| kinds.iter().any(|k| self.contains(*k)))
    }

    /// What `reader` (the authenticated pubkey, if any) may read under these kinds.
    pub fn viewer(&self, reader: Option<PubKey>) -> Viewer {
        let held = self.1.held.now();
        let held = (!held.is_empty() && !reader.is_some_and(|r| self.is_admin(&r))).then_some(held);
        Viewer { private: self.clone(), reader, screen: None, held }
    }
}

/// The groups (NIP-29) whose events one reader may not be served: the private groups it is not
/// a member of (their events name them in `h`) and the hidden groups it is not a member of (their
/// relay-signed state events, kinds 39000–39009, name them in `d`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupScreen {
    /// Groups whose events are withheld.
    pub unreadable: std::collections::HashSet<String>,
    /// Groups whose state events are withheld.
    pub unseen: std::collections::HashSet<String>,
}

impl GroupScreen {
    /// True when it withholds nothing.
    pub fn is_empty(&self) -> bool {
        self.unreadable.is_empty() && self.unseen.is_empty()
    }

    /// True when it withholds an event with `tags` of `kind`.
    pub fn withholds(&self, kind: Kind, tags: &[Vec<String>]) -> bool {
        tag_values(tags, "h").any(|h| self.unreadable.contains(h))
            || ((39000..=39009).contains(&kind.0) && tag_values(tags, "d").any(|d| self.unseen.contains(d)))
    }
}

/// Who reads, as the read restrictions see it: the private kinds in force and the pubkey the
/// reader authenticated as, if any.
#[derive(Clone, Debug, Default)]
pub struct Viewer {
    private: PrivateKinds,
    reader: Option<PubKey>,
    /// The groups withheld from this reader; `None`: none.
    screen: Option<Arc<GroupScreen>>,
    /// The events held for review, when some are and the reader is no admin.
    held: Option<Arc<HashSet<EventId>>>,
}

impl Viewer {
    /// A viewer of everything: the admin export and the offline commands, which the operator
    /// runs on their own data directory.
    pub fn everything() -> Viewer {
        Viewer::default()
    }

    /// The private kinds this viewer is held to.
    pub fn private(&self) -> &PrivateKinds {
        &self.private
    }

    /// This viewer, held also to `screen` (the groups withheld from it), when it withholds any.
    pub fn screened(self, screen: GroupScreen) -> Viewer {
        Viewer { screen: (!screen.is_empty()).then(|| Arc::new(screen)), ..self }
    }

    /// True when some groups' events are withheld from this viewer: then whether it may read an
    /// event depends on its tags whatever its kind, and no count or item set may be read from
    /// the index's lists alone.
    pub fn screens(&self) -> bool {
        self.screen.is_some() || self.held.is_some()
    }

    /// True when the event `id` by `author` is held for review and this reader is not its author
    /// (admins are given no held set).
    pub fn withholds(&self, id: &EventId, author: &PubKey) -> bool {
        self.held.as_ref().is_some_and(|held| held.contains(id)) && self.reader != Some(*author)
    }

    /// True when whether this viewer may read an event of `kind` by `author` depends on its tags
    /// (a private kind, by another author, and a reader who authenticated; or groups withheld).
    pub fn needs_tags(&self, kind: Kind, author: &PubKey) -> bool {
        self.screens() || (self.private.contains(kind) && self.reader.is_some_and(|reader| reader != *author))
    }

    /// True when this viewer may be served an event of `kind` by `author` with `tags`.
    pub fn may_read(&self, kind: Kind, author: &PubKey, tags: &[Vec<String>]) -> bool {
        if self.screen.as_ref().is_some_and(|screen| screen.withholds(kind, tags)) {
            return false;
        }
        if !self.private.contains(kind) {
            return true;
        }
        let Some(reader) = &self.reader else { return false };
        if reader == author {
            return true;
        }
        if self.private.sealed(kind) {
            return self.private.is_admin(reader);
        }
        let hex = reader.to_hex();
        tag_values(tags, "p").any(|p| p.eq_ignore_ascii_case(&hex))
    }

    /// True when an event of `kind` is refused to this viewer whatever its author and tags
    /// (a private kind and a reader who has not authenticated), so no record needs reading.
    pub fn refuses_outright(&self, kind: Kind) -> bool {
        self.private.contains(kind) && self.reader.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> PubKey {
        PubKey([n; 32])
    }

    fn p(to: u8) -> Vec<Vec<String>> {
        vec![vec!["p".into(), key(to).to_hex()]]
    }

    #[test]
    fn a_report_is_its_authors_and_the_admins_only_not_the_reported_keys() {
        let (author, reported, admin, stranger) = (key(1), key(2), key(3), key(4));
        let private = PrivateKinds::new(&[Kind(4)]).with_reports_sealed_for(&[admin]);
        let report = (REPORT, author, p(2));
        let read = |who: Option<PubKey>| private.viewer(who).may_read(report.0, &report.1, &report.2);
        assert!(read(Some(author)) && read(Some(admin)));
        assert!(!read(Some(reported)) && !read(Some(stranger)) && !read(None));
        assert!(private.only(&serde_json::from_str(r#"{"kinds":[1984]}"#).unwrap()));
        // Direct messages keep their own rule.
        assert!(private.viewer(Some(reported)).may_read(Kind(4), &author, &p(2)));
    }

    #[test]
    fn a_held_event_is_its_authors_and_the_admins_only() {
        let (author, admin, stranger) = (key(1), key(3), key(4));
        let private = PrivateKinds::new(&[]).with_reports_sealed_for(&[admin]);
        let id = EventId([9; 32]);
        assert!(!private.viewer(Some(stranger)).withholds(&id, &author));
        private.held().set([id]);
        assert!(private.viewer(Some(stranger)).withholds(&id, &author) && private.viewer(None).withholds(&id, &author));
        assert!(private.viewer(Some(stranger)).screens());
        assert!(!private.viewer(Some(author)).withholds(&id, &author));
        assert!(!private.viewer(Some(admin)).withholds(&id, &author) && !private.viewer(Some(admin)).screens());
        private.held().set([]);
        assert!(!private.viewer(Some(stranger)).withholds(&id, &author));
    }

    #[test]
    fn a_private_event_is_served_to_its_author_and_its_recipients_only() {
        let private = PrivateKinds::new(&[Kind(1059), Kind(4), Kind(4)]);
        let (author, recipient, stranger) = (key(1), key(2), key(3));
        let wrap = (Kind(1059), author, p(2));
        for (reader, served) in [(Some(author), true), (Some(recipient), true), (Some(stranger), false), (None, false)]
        {
            let viewer = private.viewer(reader);
            assert_eq!(viewer.may_read(wrap.0, &wrap.1, &wrap.2), served, "reader {reader:?}");
        }
        // A public kind is served to anyone; nothing is private to the viewer of everything.
        assert!(private.viewer(None).may_read(Kind(1), &author, &[]));
        assert!(Viewer::everything().may_read(Kind(4), &author, &[]));
        // A recipient named in upper case is still the recipient.
        let upper = vec![vec!["p".into(), recipient.to_hex().to_uppercase()]];
        assert!(private.viewer(Some(recipient)).may_read(Kind(4), &author, &upper));
        // Whether the tags must be read, and whether no tag could help.
        assert!(private.viewer(Some(recipient)).needs_tags(Kind(4), &author));
        assert!(!private.viewer(Some(author)).needs_tags(Kind(4), &author));
        assert!(!private.viewer(None).needs_tags(Kind(4), &author));
        assert!(private.viewer(None).refuses_outright(Kind(4)));
        assert!(!private.viewer(Some(recipient)).refuses_outright(Kind(4)));
        assert!(!private.viewer(None).refuses_outright(Kind(1)));
    }

    #[test]
    fn a_filter_is_private_only_when_it_names_only_private_kinds() {
        let private = PrivateKinds::new(&[Kind(4), Kind(1059)]);
        let filter = |json: &str| -> Filter { serde_json::from_str(json).unwrap() };
        assert!(private.only(&filter(r##"{"kinds":[1059],"#p":["aa"]}"##)));
        assert!(private.only(&filter(r#"{"kinds":[4,1059]}"#)));
        assert!(!private.only(&filter(r#"{"kinds":[4,1]}"#)));
        assert!(!private.only(&filter("{}")));
        assert!(!private.only(&filter(r#"{"kinds":[]}"#)));
        assert!(private.can_match(&filter("{}")));
        assert!(private.can_match(&filter(r#"{"kinds":[1,4]}"#)));
        assert!(!private.can_match(&filter(r#"{"kinds":[1,7]}"#)));
        assert!(!PrivateKinds::default().can_match(&filter("{}")));
    }
}
