//! The kind rules of the publish path, as one table: khatru's hook lists, typed.
//!
//! Owns [`RULES`], every rule an event meets because of what it is (its kind, or for NIP-29 its
//! `h` tag), each a named [`Rule`] with two steps: [`Rule::admit`], asked in the table's order
//! after the signature and NIP-70 checks and before the store, which lets the event on, keeps
//! what its *after stored* step needs, or answers it there (refused, or taken without storing
//! it); and [`AfterStored::run`], done once the event is durably stored. A rule's own logic lives
//! in its room (`membership`, `groups::publish`, `vanish`, `report_hold`, `moderation`); this
//! table is the one place that says which rules exist, in which order, and when each runs.
//!
//! To add a kind rule: a variant of [`Rule`], its place in [`RULES`], its arm in
//! [`Rule::admit`] (and, when it acts once stored, a variant of [`AfterStored`]).
//!
//! The rule every *stored* path meets, imports and sync rounds included — kind 19004 is the
//! relay's own to sign — is the store side's, in `ingest::settle`.

use crate::app::AppState;
use crate::groups::publish::{Admission, Change};
use crate::limiter::HandlerPermit;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, Timestamp, VerifiedEvent};

use super::outcome::{Outcome, Publisher};

/// One kind rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// NIP-59 / NIP-17: a gift wrap from outside to a member is taken from an authenticated
    /// connection only, so that a relay that restricts writes is not an anonymous mail drop.
    GiftWrapInbox,
    /// NIP-62: a request to vanish must name this relay (or every relay); once stored, the
    /// author's events and blobs are removed.
    Vanish,
    /// NIP-43: join and leave requests are answered by the relay, never stored or delivered.
    Membership,
    /// NIP-29: a group event meets its group's rules; a change is committed once stored.
    Groups,
    /// NIP-56: a report, once stored, may hold the reported event for review.
    ReportHold,
}

/// Every kind rule, in the order the publish path asks them.
pub(crate) const RULES: [Rule; 5] =
    [Rule::GiftWrapInbox, Rule::Vanish, Rule::Membership, Rule::Groups, Rule::ReportHold];

/// What a rule's admit step made of an event.
pub(crate) enum Admit<'a> {
    /// On to the next rule and the store.
    Pass,
    /// On, and this is done once the event is stored.
    After(AfterStored<'a>),
    /// Answered here: the event goes no further.
    Answer(Outcome),
}

/// What a rule does once its event is stored.
pub(crate) enum AfterStored<'a> {
    /// NIP-29: the judged change committed and carried out.
    Group(Box<Change<'a>>),
    /// NIP-62: the request carried out.
    Vanish(Event),
    /// NIP-56: the reported event held when its reports reach the threshold.
    Report(Event),
}

impl Rule {
    /// This rule's admit step for `event` from `publisher`. `permit` is the publisher's handler
    /// permit: a rule that answers after slow work of its own lets it go first.
    pub(crate) async fn admit<'a>(
        self,
        app: &'a AppState,
        event: &VerifiedEvent,
        publisher: &Publisher,
        permit: &mut Option<HandlerPermit>,
        now: Timestamp,
    ) -> Admit<'a> {
        let refused = |refusal: Refusal| Admit::Answer(Outcome::Refused(refusal));
        match self {
            Rule::GiftWrapInbox => {
                let outside = crate::protocol::private::is_gift_wrap(event.kind)
                    && publisher.authed.is_none()
                    && app.moderation.restricted_writes()
                    && !app.moderation.is_member(&event.pubkey);
                match outside {
                    true => refused(Refusal::new(
                        Prefix::AuthRequired,
                        "authenticate (NIP-42) to send a gift wrap to a member of this relay",
                    )),
                    false => Admit::Pass,
                }
            }
            Rule::Vanish if event.kind == crate::vanish::KIND => {
                match crate::vanish::names_this_relay(event, publisher.relay.as_ref()) {
                    Ok(()) => Admit::After(AfterStored::Vanish((**event).clone())),
                    Err(refusal) => refused(refusal),
                }
            }
            Rule::Membership if crate::membership::is_request(event.kind) => {
                drop(permit.take());
                Admit::Answer(match crate::membership::request(app, event, publisher.authed).await {
                    Ok(crate::membership::Answer::Done) => Outcome::Accepted,
                    Ok(crate::membership::Answer::AlreadyMember) => Outcome::AlreadyMember,
                    Err(refusal) => Outcome::Refused(refusal),
                })
            }
            Rule::Groups => match crate::groups::publish::admit(app, event, now).await {
                Ok(Admission::Change(change)) => Admit::After(AfterStored::Group(change)),
                Ok(Admission::Plain | Admission::Message) => Admit::Pass,
                Err(refusal) => refused(refusal),
            },
            Rule::ReportHold if event.kind == crate::protocol::private::REPORT => {
                Admit::After(AfterStored::Report((**event).clone()))
            }
            Rule::Vanish | Rule::Membership | Rule::ReportHold => Admit::Pass,
        }
    }
}

impl AfterStored<'_> {
    /// This step, once the event is stored; `Err` is what the publisher is told instead of
    /// `OK true` (the event stays stored).
    pub(crate) async fn run(self, app: &AppState) -> Result<(), Refusal> {
        match self {
            AfterStored::Group(change) => crate::groups::publish::done(app, change).await,
            AfterStored::Vanish(request) => crate::vanish::vanish(app, &request).await,
            AfterStored::Report(report) => {
                crate::report_hold::after_report(app, &report).await;
                Ok(())
            }
        }
    }
}
