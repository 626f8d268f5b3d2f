//! The gate: for every transport (WebSocket, REST, media), may this principal publish this event,
//! and may it read with these filters — and as which reader.
//!
//! Owns the questions a transport asks before it hands an event to the publish path or a filter
//! to the read path, and their typed answers: [`door`] (the access mode, before an event is
//! taken at all), [`publish`] (the one publish path, `ingest`, with its kind rules), [`access`]
//! (the access mode, before a read or any other call), [`read`] (the access mode, then whether
//! an unauthenticated reader asks only for what it may not read, then the reader's [`Viewer`]:
//! private kinds and private groups as the store applies them) and [`viewer`] (the same view,
//! for a read by id); and a REQ for an invite (NIP-43), which the relay answers itself:
//! [`invite_request`] says whether a request is one and whether this reader may have one,
//! [`invite`] makes it. For the media server: whether its blobs are for members only
//! ([`media_for_members`]), who [`belongs`] (a member or an admin), why a key may not upload
//! ([`upload_refusal`]), and whose blobs are served at all ([`serves_blobs_of`]: not a banned
//! key's). A transport parses, asks the gate, and writes the answer in its own
//! wire form; it never calls the group viewer or the membership rules itself.

use crate::app::AppState;
use crate::ingest::{Outcome, Publisher};
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, Filter, PubKey, Viewer};

/// The `auth-required:` text of a read an unauthenticated reader may not make.
const PRIVATE_KINDS_NEED_AUTH: &str =
    "these kinds are served only to their author and recipients; answer the AUTH challenge";

/// Why a read is refused before it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadRefusal {
    /// The access mode refuses this reader (`members-only`).
    Access(Refusal),
    /// Every filter asks only for private kinds or private groups, and the reader has not
    /// authenticated: it authenticates and asks again (NIP-42).
    PrivateNeedsAuth,
}

impl ReadRefusal {
    /// The refusal as a WebSocket `CLOSED` or `NEG-ERR` says it.
    pub(crate) fn refusal(&self) -> Refusal {
        match self {
            ReadRefusal::Access(refusal) => refusal.clone(),
            ReadRefusal::PrivateNeedsAuth => Refusal::new(Prefix::AuthRequired, PRIVATE_KINDS_NEED_AUTH),
        }
    }
}

/// Why `event`, sent by a principal authenticated as `authed`, is not taken at all under
/// `access.mode = "members-only"`: the mode's refusal, except for a NIP-43 join request (how a
/// stranger becomes a member: the membership rules answer it) and members' mail from outside (a
/// gift wrap or zap receipt to a member, judged by moderation like any event). `None` when the
/// event goes on to [`publish`].
pub(crate) fn door(app: &AppState, event: &Event, authed: Option<PubKey>) -> Option<Refusal> {
    let refused = app.moderation.access_refusal(authed)?;
    match event.kind == crate::membership::JOIN || app.moderation.is_mail_to_member(event) {
        true => None,
        false => Some(refused),
    }
}

/// Publishes an event that passed the [`door`]: the one publish path for every transport.
pub(crate) async fn publish(app: &AppState, event: Event, publisher: Publisher) -> Outcome {
    crate::ingest::publish(app, event, publisher).await
}

/// Why the access mode refuses `authed` anything but publishing (reads, and every REST call
/// but a publish); None when it may go on.
pub(crate) fn access(app: &AppState, authed: Option<PubKey>) -> Option<Refusal> {
    app.moderation.access_refusal(authed)
}

/// May `authed` read with `filters`, and as which reader.
pub(crate) fn read(app: &AppState, authed: Option<PubKey>, filters: &[Filter]) -> Result<Viewer, ReadRefusal> {
    if let Some(refused) = access(app, authed) {
        return Err(ReadRefusal::Access(refused));
    }
    if crate::query::needs_auth_to_read(app, authed, filters) {
        return Err(ReadRefusal::PrivateNeedsAuth);
    }
    Ok(viewer(app, authed))
}

/// What `authed` may read: the private kinds' rules and the groups' (for a read by id, whose
/// access the caller already asked).
pub(crate) fn viewer(app: &AppState, authed: Option<PubKey>) -> Viewer {
    app.groups.viewer(&app.private, authed)
}

/// Whether `filters` ask for an invite (NIP-43: every filter names kind 28935 alone), which the
/// relay answers itself rather than from the store: None when they ask for something else;
/// `Some(Ok)` for an admin (`admin.pubkeys`), who is handed a fresh claim; `Some(Err)` for
/// anyone else (`auth-required:` before AUTH).
pub(crate) fn invite_request(
    app: &AppState,
    authed: Option<PubKey>,
    filters: &[Filter],
) -> Option<Result<(), Refusal>> {
    let invite = crate::membership::INVITE;
    if filters.is_empty() || !filters.iter().all(|f| f.kinds.as_deref() == Some(&[invite][..])) {
        return None;
    }
    Some(match authed {
        None => Err(Refusal::new(Prefix::AuthRequired, "invite claims are handed to the relay's admins; authenticate")),
        Some(pk) if !app.config.admin.pubkeys.contains(&pk) => {
            Err(Refusal::new(Prefix::Restricted, "invite claims are handed to the relay's admins only"))
        }
        Some(_) => Ok(()),
    })
}

/// A fresh single-use invite claim, as the kind 28935 event the relay signs (its JSON), for a
/// request [`invite_request`] let through.
pub(crate) async fn invite(app: &AppState) -> Result<crate::protocol::EventJson, String> {
    let expires_at = crate::protocol::Timestamp::now().0 + crate::membership::INVITE_CLAIM_SECS;
    let (code, _) = crate::membership::mint(app, 1, expires_at, "handed out in a kind 28935 event".into())
        .await
        .map_err(|e| e.to_string())?;
    crate::membership::invite_event(app, &code).to_shared_json().map_err(|e| e.to_string())
}

/// Whether the media server's blobs are read by members only (`access.mode = "members-only"`):
/// then a `get` or `list` authorization must name a key that [`belongs`].
pub(crate) fn media_for_members(app: &AppState) -> bool {
    app.moderation.mode() == crate::config::AccessMode::MembersOnly
}

/// True when `pubkey` is a member of the relay or one of its admins.
pub(crate) fn belongs(app: &AppState, pubkey: &PubKey) -> bool {
    app.moderation.is_member(pubkey) || app.config.admin.pubkeys.contains(pubkey)
}

/// Why `uploader` may not upload a blob: a banned key, or one that does not [`belong`](belongs)
/// where only members upload (`media.upload`, and the access mode's default); None when it may.
pub(crate) fn upload_refusal(app: &AppState, uploader: &PubKey) -> Option<Refusal> {
    if app.moderation.is_banned(uploader) {
        return Some(Refusal::new(Prefix::Blocked, "this pubkey is banned from this relay"));
    }
    let members_only = app.config.media.uploaders(app.moderation.mode() != crate::config::AccessMode::Public)
        == crate::config::Uploaders::Members;
    (members_only && !belongs(app, uploader))
        .then(|| Refusal::new(Prefix::Restricted, "only members of this relay may upload here"))
}

/// True when the blobs `owner` uploaded are served (listed, fetched): not a banned key's.
pub(crate) fn serves_blobs_of(app: &AppState, owner: &PubKey) -> bool {
    !app.moderation.is_banned(owner)
}
