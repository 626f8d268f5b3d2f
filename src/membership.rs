//! NIP-43 membership: join and leave requests, invite codes, and the relay's signed account of
//! who its members are.
//!
//! Owns what the relay does with a kind 28934 join request (a valid `claim` from an author
//! authenticated as itself makes it a member) and a kind 28936 leave request (the author is a
//! member no more); minting invite codes (for the admin API, and a fresh claim in a kind 28935
//! event for an admin who asks with a REQ); and, with `access.publish_members`, the kind 13534
//! list and the kind 8000 / 8001 events of each change, signed by the relay's own key with the
//! NIP-70 `-` tag. The member list itself is the moderation state's; every change is audited.
//! Requests are billed like any frame before they get here (the limiter refuses a flood of bad
//! claims before any lookup), are never stored, and are never delivered to anyone.

use serde_json::json;

use crate::app::AppState;
use crate::config::GroupCreators;
use crate::moderation::{Invite, ModerationError};
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, Kind, PubKey, Timestamp, VerifiedEvent};
use crate::store::StoreError;

/// A join request (`["claim", <code>]`).
pub const JOIN: Kind = Kind(28934);
/// An invite: a claim handed out by the relay, ephemeral.
pub const INVITE: Kind = Kind(28935);
/// A leave request.
pub const LEAVE: Kind = Kind(28936);
/// The relay's member list (replaceable; one `["member", <hex>]` per member).
pub const LIST: Kind = Kind(13534);
/// A member added (`["p", <hex>]`).
pub const ADDED: Kind = Kind(8000);
/// A member removed (`["p", <hex>]`).
pub const REMOVED: Kind = Kind(8001);
/// Who may create rooms (groups), as chat clients read it (Flotilla offers "Create room" to a
/// key a `p` tag of it names): replaceable, signed by the relay only.
pub const ROOM_CREATORS: Kind = Kind(19004);
/// How far a request's `created_at` may be from now: an older one is a replay.
const FRESH_SECS: u64 = 600;
/// How long a claim handed out in a kind 28935 event stays good (single use).
pub const INVITE_CLAIM_SECS: u64 = 86_400;

/// True for the kinds that are requests to the relay, not events to store or deliver.
pub fn is_request(kind: Kind) -> bool {
    kind == JOIN || kind == LEAVE
}

/// What an accepted request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Done (`OK true`): joined, left, or a join on a relay where the key may publish anyway.
    Done,
    /// A join from a member: nothing changes and no claim is used (`OK true "duplicate: you are
    /// already a member"`, as NIP-43 suggests).
    AlreadyMember,
}

/// The `OK` text of [`Answer::AlreadyMember`].
pub const ALREADY_MEMBER: &str = "duplicate: you are already a member";

/// Answers a join or leave request `event` from a connection authenticated as `authed`: what it
/// came to, or why not.
pub async fn request(app: &AppState, event: &VerifiedEvent, authed: Option<PubKey>) -> Result<Answer, Refusal> {
    let restricted = |text: &str| Refusal::new(Prefix::Restricted, text);
    match authed {
        None => return Err(Refusal::new(Prefix::AuthRequired, "authenticate as the requester first")),
        Some(pk) if pk != event.pubkey => return Err(restricted("a request must be sent by its own author")),
        Some(_) => {}
    }
    let now = Timestamp::now().0;
    if event.created_at.0.abs_diff(now) > FRESH_SECS {
        return Err(Refusal::new(Prefix::Invalid, "a join or leave request must be made now (created_at)"));
    }
    let pubkey = event.pubkey;
    let failed = |e: ModerationError| {
        tracing::error!(error = %e, "a membership change failed");
        match e {
            ModerationError::Store(_) => Refusal::new(Prefix::Error, "the membership change could not be saved"),
            shared => Refusal::new(Prefix::Error, shared.to_string()),
        }
    };
    if event.kind == LEAVE {
        let old = app.moderation.remove_member(&app.store, pubkey).await.map_err(failed)?;
        if old.is_none() {
            return Err(match app.config.auth.members.contains(&pubkey) {
                true => restricted("a member named by the relay's configuration cannot leave here"),
                false => restricted("not a member of this relay"),
            });
        }
        audit(app, &pubkey, "member.leave", json!(old), serde_json::Value::Null).await.map_err(|e| failed(e.into()))?;
        changed(app, pubkey, false).await;
        return Ok(Answer::Done);
    }
    // A member's join again changes nothing and uses no claim (NIP-43: a duplicate).
    if app.moderation.is_member(&pubkey) {
        return Ok(Answer::AlreadyMember);
    }
    let code = event.tag_values("claim").next().map(str::to_string).unwrap_or_default();
    // On a relay where anyone may publish (a public one without a member list), a join without a
    // good code has nothing to grant and nothing to refuse: the key may post already. Chat
    // clients (Flotilla) send `["claim", ""]` to add any space; a good code still makes a member.
    let open = !app.moderation.restricted_writes();
    if open && !app.moderation.has_invite(&code) {
        return Ok(Answer::Done);
    }
    // Checked, used and the member added in one change of the state.
    let joined =
        app.moderation.join_with_invite(&app.store, pubkey, &code, now).await.map_err(failed)?.map_err(restricted)?;
    if joined {
        audit(app, &pubkey, "member.join", serde_json::Value::Null, json!(short_code(&code)))
            .await
            .map_err(|e| failed(e.into()))?;
        changed(app, pubkey, true).await;
    }
    Ok(Answer::Done)
}

async fn audit(
    app: &AppState,
    who: &PubKey,
    action: &str,
    old: serde_json::Value,
    new: serde_json::Value,
) -> Result<(), StoreError> {
    crate::audit::record(
        &app.store,
        &app.config.node.name,
        &format!("nip43:{}", who.to_hex()),
        action,
        &who.to_hex(),
        old,
        new,
    )
    .await
}

/// A new invite code that allows `uses` claims until `expires_at` (0: never).
pub async fn mint(
    app: &AppState,
    uses: u32,
    expires_at: u64,
    note: String,
) -> Result<(String, Invite), ModerationError> {
    let code = random_code().map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
    let invite = Invite { uses, used: 0, expires_at, note, created_at: Timestamp::now().0 };
    let kept = invite.clone();
    app.moderation.keep_invite(&app.store, code.clone(), kept).await?;
    Ok((code, invite))
}

/// 16 random bytes as hex: a code that cannot be guessed.
fn random_code() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
    Ok(hex::encode(bytes))
}

/// The kind 28935 event that hands out `code`, signed by the relay.
pub fn invite_event(app: &AppState, code: &str) -> Event {
    let tags = vec![vec!["-".to_string()], vec!["claim".to_string(), code.to_string()]];
    app.keys.sign(Timestamp::now(), INVITE, tags, "")
}

/// Tells the world, when `access.publish_members` is on, that `pubkey` was added or removed: a
/// kind 8000 / 8001 event and the member list (13534) anew, signed by the relay and stored as
/// any event is. A failure is logged: the membership change itself stands.
pub async fn changed(app: &AppState, pubkey: PubKey, added: bool) {
    if app.config.groups.create != GroupCreators::Admins {
        publish_room_creators(app).await;
    }
    if !app.config.access.publish_members {
        return;
    }
    let now = Timestamp::now();
    let protected = vec!["-".to_string()];
    let change = app.keys.sign(
        now,
        if added { ADDED } else { REMOVED },
        vec![protected.clone(), vec!["p".into(), pubkey.to_hex()]],
        "",
    );
    let members = members(app);
    let mut tags = vec![protected];
    tags.extend(members.iter().map(|m| vec!["member".to_string(), m.to_hex()]));
    // Replaces the one before even within the same second (a replaceable event's tie goes to the
    // lowest id, which would be chance).
    let list = app.keys.sign(Timestamp(now.0.max(last_list_at(app).await + 1)), LIST, tags, "");
    for event in [change, list] {
        // A failure is logged where it happens; the next change publishes the list again.
        let _ = crate::delivery::publish_own(app, event).await;
    }
}

/// Every member (`auth.members` and the list kept live), sorted, each once.
fn members(app: &AppState) -> Vec<PubKey> {
    let mut members: Vec<PubKey> = app.config.auth.members.clone();
    members.extend(app.moderation.snapshot().allowed_pubkeys.keys().copied());
    members.sort_unstable();
    members.dedup();
    members
}

/// The keys `groups.create` lets create a group: the admins, and the members unless only admins
/// may. Under `authenticated` on a relay anyone writes to, every key may and no list names them
/// all: none is named (the admins learn it from NIP-86 `supportedmethods`; everyone's 9007 is
/// accepted all the same).
fn room_creators(app: &AppState) -> Vec<PubKey> {
    if app.config.groups.create == GroupCreators::Authenticated && !app.moderation.restricted_writes() {
        return Vec::new();
    }
    let mut keys = app.config.admin.pubkeys.clone();
    if app.config.groups.create != GroupCreators::Admins {
        keys.extend(members(app));
    }
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Publishes the relay's kind 19004 event naming [`room_creators`] (one `p` tag each, and the
/// NIP-70 `-` tag) when the stored one names others, or none is stored and someone is to be
/// named: at start (the setting or the admins may have changed) and after each change of the
/// members. Nothing with groups off.
pub async fn publish_room_creators(app: &AppState) {
    if !app.config.groups.enabled {
        return;
    }
    let keys = room_creators(app);
    let stored = newest_own(app, ROOM_CREATORS).await;
    let named = |v: &serde_json::Value| -> Vec<String> {
        let tags = v["tags"].as_array().cloned().unwrap_or_default();
        tags.iter().filter(|t| t[0] == "p").filter_map(|t| t[1].as_str().map(str::to_string)).collect()
    };
    let wanted: Vec<String> = keys.iter().map(PubKey::to_hex).collect();
    // Nothing to say (no admin, no member, none said before), or the same as before.
    let before = stored.as_ref().map(named).unwrap_or_default();
    if before == wanted && (stored.is_some() || wanted.is_empty()) {
        return;
    }
    let at = stored.and_then(|v| v["created_at"].as_u64()).unwrap_or(0);
    let mut tags = vec![vec!["-".to_string()]];
    tags.extend(wanted.into_iter().map(|hex| vec!["p".to_string(), hex]));
    let event = app.keys.sign(Timestamp(Timestamp::now().0.max(at + 1)), ROOM_CREATORS, tags, "");
    // A failure is logged where it happens.
    let _ = crate::delivery::publish_own(app, event).await;
}

/// When the relay's current member list was made (0: none).
async fn last_list_at(app: &AppState) -> u64 {
    newest_own(app, LIST).await.and_then(|v| v["created_at"].as_u64()).unwrap_or(0)
}

/// The newest stored event of `kind` the relay signed, as JSON.
async fn newest_own(app: &AppState, kind: Kind) -> Option<serde_json::Value> {
    let filter = crate::protocol::Filter {
        kinds: Some(vec![kind]),
        authors: Some(vec![app.keys.public_key()]),
        limit: Some(1),
        ..Default::default()
    };
    let found = app.store.query_async(vec![filter], Timestamp::now(), crate::protocol::Viewer::everything()).await;
    let newest = found.ok().and_then(|(events, _)| events.into_iter().next());
    newest.and_then(|e| serde_json::from_str::<serde_json::Value>(e.as_str()).ok())
}

/// An invite code as the audit log and the admin page name it: its first 8 characters (the whole
/// code would let anyone who reads the log claim what is left of it).
pub(crate) fn short_code(code: &str) -> String {
    format!("{}…", code.chars().take(8).collect::<String>())
}
