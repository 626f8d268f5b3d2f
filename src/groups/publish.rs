//! What a group event does on its way in (NIP-29), and the relay's own answers to it.
//!
//! Owns the checks an event addressed to a group meets before the store's rules ([`admit`]):
//! only the relay signs kinds 39000–39009; late publication; `previous` references to events
//! the relay has; then a message is held to [`Groups::admits`](super::state::Groups::admits)
//! and a change (moderation 9000–9010, join 9021, leave 9022) is judged by the fold while this
//! node's turn to change groups is held. Once the store has the change, [`done`] commits it and
//! carries out what it asks: the relay's own 9000 / 9001 answering a join or a leave, its
//! 39000–39003 (and 39005 once pinned) signed anew, a moderator's deletions, a whole group
//! removed. Every event the relay signs here is stored and delivered as any event, and dated
//! after what it answers, so the fold of the store arrives where the live state did.

use crate::app::AppState;
use crate::config::GroupCreators;
use crate::protocol::nip29::{self, group_of, is_moderation, is_relay_state};
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, EventId, Filter, Kind, PubKey, Timestamp, VerifiedEvent, Viewer};
use crate::store::PutOutcome;

use super::render::{StateEvent, state_events};
use super::state::{Effect, GroupError, Update};

/// How many of a group's latest events a `previous` reference may name.
const PREVIOUS_WINDOW: u64 = 50;

/// What an event is to the groups.
pub enum Admission<'a> {
    /// Not a group event (or groups are off): the store's rules alone.
    Plain,
    /// A message to a group it may be stored in.
    Message,
    /// A change to a group, judged: once stored, [`done`] commits it.
    Change(Box<Change<'a>>),
}

/// A judged change, holding this node's turn to change groups until it is done or dropped.
pub struct Change<'a> {
    _turn: tokio::sync::MutexGuard<'a, ()>,
    effect: Effect,
    update: Option<Update>,
    group: String,
    asked: Timestamp,
}

/// The refusal a client is told for `error`.
pub fn refusal(error: &GroupError) -> Refusal {
    let prefix = match error {
        GroupError::Exists(_) | GroupError::AlreadyMember => Prefix::Duplicate,
        GroupError::NotAllowed(_) | GroupError::NotMember | GroupError::BadCode | GroupError::MembersOnly => {
            Prefix::Restricted
        }
        GroupError::Deleted => Prefix::Blocked,
        _ => Prefix::Invalid,
    };
    Refusal::new(prefix, error.to_string())
}

/// The checks `event` meets as a group event, before the store's rules.
pub async fn admit<'a>(app: &'a AppState, event: &VerifiedEvent, now: Timestamp) -> Result<Admission<'a>, Refusal> {
    let registry = &app.groups;
    if !registry.enabled() {
        return Ok(Admission::Plain);
    }
    if is_relay_state(event.kind) && event.pubkey != app.keys.public_key() {
        return Err(Refusal::new(
            Prefix::Restricted,
            "kinds 39000-39009 are signed by this relay's own key (NIP-11 self) only",
        ));
    }
    let Some(id) = group_of(event).map(str::to_string) else { return Ok(Admission::Plain) };
    let late = registry.config().late_secs;
    if late > 0 && event.kind != Kind(1059) && event.created_at.0 < now.0.saturating_sub(late) {
        return Err(Refusal::new(
            Prefix::Invalid,
            format!(
                "an event to a group may be dated at most {late} seconds in the past; sign it again with the time now"
            ),
        ));
    }
    previous(app, event, &id).await?;
    let changes = is_moderation(event.kind) || event.kind == nip29::JOIN || event.kind == nip29::LEAVE;
    if !changes {
        registry.read().admits(event).map_err(|e| refusal(&e))?;
        return Ok(Admission::Message);
    }
    if event.kind == nip29::CREATE_GROUP {
        may_create(app, event)?;
    }
    let turn = registry.turn().await;
    let judged = {
        let groups = registry.read();
        // A request that already waits is not kept twice; one with a code is judged anew.
        let waits = groups.get(&id).is_some_and(|g| g.pending.contains_key(&event.pubkey));
        if event.kind == nip29::JOIN && waits && event.tag_values("code").next().is_none() {
            return Err(pending());
        }
        groups.judge(event, now.0)
    };
    let (effect, update) = match judged {
        Err(GroupError::OutOfOrder(_)) => judge_in_place(app, event, &id, now).await?,
        other => other.map_err(|e| refusal(&e))?,
    };
    Ok(Admission::Change(Box::new(Change { _turn: turn, effect, update, group: id, asked: event.created_at })))
}

/// Judges `event`, dated before its group's last change, where a replay of the store will put
/// it: among the group's stored events (clients' clocks differ by seconds; a replay orders by
/// time).
async fn judge_in_place(
    app: &AppState,
    event: &Event,
    id: &str,
    now: Timestamp,
) -> Result<(Effect, Option<Update>), Refusal> {
    let filter =
        Filter { kinds: Some(super::state_kinds()), tags: [('h', vec![id.to_string()])].into(), ..Filter::default() };
    let export = app
        .store
        .export_async(filter, now)
        .await
        .map_err(|_| Refusal::new(Prefix::Error, "the group's history could not be read"))?;
    let stored: Vec<Event> = export.flatten().filter_map(|json| serde_json::from_str(json.as_str()).ok()).collect();
    let (before, after): (Vec<Event>, Vec<Event>) = stored.into_iter().partition(|e| e.created_at <= event.created_at);
    match app.groups.read().judge_among(event, &before, &after, now.0) {
        // Dated before the group was made: a replay would find no group there.
        Err(GroupError::NoSuchGroup(_)) => Err(Refusal::new(
            Prefix::Invalid,
            format!(
                "an event to group `{id}` may not be dated before the group was created; sign it again with the time now"
            ),
        )),
        other => other.map_err(|e| refusal(&e)),
    }
}

/// The refusal of a join that waits for an admin.
fn pending() -> Refusal {
    Refusal::new(Prefix::Restricted, "the group is closed: your join request waits for an admin to let you in")
}

/// `groups.create`: whether `event`'s author may create a group. Its signature names the creator,
/// as it names the author of every other change to a group; whether a write needs NIP-42 at all
/// is `access.mode`'s, asked before this (a client that sends the 9007 before it answers the
/// challenge, as Chachi does, is not sent back to authenticate on a relay anyone writes to).
fn may_create(app: &AppState, event: &Event) -> Result<(), Refusal> {
    let allowed = match app.groups.config().create {
        GroupCreators::Authenticated => true,
        GroupCreators::Members => app.moderation.is_member(&event.pubkey),
        GroupCreators::Admins => app.config.admin.pubkeys.contains(&event.pubkey),
    };
    match allowed {
        true => Ok(()),
        false => Err(Refusal::new(Prefix::Restricted, "this relay lets only some keys create groups (groups.create)")),
    }
}

/// `previous` (NIP-29 timeline references): at least `groups.previous_min`, each the first 8
/// hex characters of one of the group's latest events here.
async fn previous(app: &AppState, event: &Event, id: &str) -> Result<(), Refusal> {
    let refs: Vec<&str> = event
        .tags
        .iter()
        .filter(|t| t.first().is_some_and(|name| name == "previous"))
        .flat_map(|t| t.iter().skip(1))
        .map(String::as_str)
        .collect();
    let min = app.groups.config().previous_min;
    if refs.len() < min {
        return Err(Refusal::new(
            Prefix::Invalid,
            format!("an event to this group needs at least {min} previous references"),
        ));
    }
    if refs.is_empty() {
        return Ok(());
    }
    let filter =
        Filter { tags: [('h', vec![id.to_string()])].into(), limit: Some(PREVIOUS_WINDOW), ..Filter::default() };
    let (latest, _) = app
        .store
        .query_async(vec![filter], Timestamp::now(), Viewer::everything())
        .await
        .map_err(|_| Refusal::new(Prefix::Error, "the group's timeline could not be read"))?;
    let known: Vec<String> = latest
        .iter()
        .filter_map(|e| serde_json::from_str::<Event>(e.as_str()).ok())
        .map(|e| e.id.to_hex()[..8].to_string())
        .collect();
    match refs.iter().find(|r| !known.iter().any(|k| k == *r)) {
        Some(unknown) => Err(Refusal::new(
            Prefix::Invalid,
            format!("previous `{unknown}` names none of this group's last {PREVIOUS_WINDOW} events on this relay"),
        )),
        None => Ok(()),
    }
}

/// A change the relay makes itself (an operator's, through the admin API): `kind` with
/// `["h", group]` and `tags`, signed with the relay's key, dated no earlier than the group's last
/// change, judged, stored and done as a member's change is.
pub async fn as_relay(app: &AppState, kind: Kind, group: &str, tags: Vec<Vec<String>>) -> Result<(), Refusal> {
    let turn = app.groups.turn().await;
    let now = Timestamp::now();
    let last = app
        .groups
        .read()
        .get(group)
        .map(|g| g.last.0)
        .ok_or_else(|| refusal(&GroupError::NoSuchGroup(group.to_string())))?;
    let mut all = vec![vec!["h".to_string(), group.to_string()]];
    all.extend(tags);
    let event = app.keys.sign(Timestamp(now.0.max(last.0)), kind, all, "");
    let (effect, update) = app.groups.read().judge(&event, now.0).map_err(|e| refusal(&e))?;
    let asked = event.created_at;
    match crate::delivery::publish_own(app, event).await {
        Ok(PutOutcome::Stored(_)) => {}
        _ => return Err(Refusal::new(Prefix::Error, "the relay's change to the group could not be stored")),
    }
    done(app, Box::new(Change { _turn: turn, effect, update, group: group.to_string(), asked })).await
}

/// Commits a stored change and carries out what it asks. `Err` is what the client is told
/// instead of `OK true` (a join kept for the admins).
pub async fn done(app: &AppState, change: Box<Change<'_>>) -> Result<(), Refusal> {
    let Change { _turn, effect, update, group, asked } = *change;
    if let Some(update) = update {
        app.groups.commit(update);
    }
    match effect {
        Effect::Nothing => {}
        Effect::Changed => sign_state(app, &group).await,
        Effect::Removed(ids) => remove_events(app, &group, &ids).await,
        Effect::GroupDeleted => remove_group(app, &group).await,
        Effect::Admit { pubkey, code } => answer(app, &group, nip29::PUT_USER, pubkey, code, asked).await,
        Effect::Remove(pubkey) => answer(app, &group, nip29::REMOVE_USER, pubkey, None, asked).await,
        Effect::Pending => return Err(pending()),
    }
    Ok(())
}

/// The relay's own 9000 or 9001 for `pubkey` in `group`, dated no earlier than the request it
/// answers and the group's last change (and stored after both), judged, stored and committed;
/// then the group's state anew.
async fn answer(app: &AppState, group: &str, kind: Kind, pubkey: PubKey, code: Option<String>, asked: Timestamp) {
    let mut tags = vec![vec!["h".to_string(), group.to_string()], vec!["p".to_string(), pubkey.to_hex()]];
    tags.extend(code.map(|c| vec!["code".to_string(), c]));
    let Some(last) = app.groups.read().get(group).map(|g| g.last.0) else { return };
    let at = Timestamp(Timestamp::now().0.max(asked.0).max(last.0));
    let event = app.keys.sign(at, kind, tags, "");
    let judged = app.groups.read().judge(&event, Timestamp::now().0);
    match judged {
        Ok((_, update)) => {
            if crate::delivery::publish_own(app, event).await.is_ok()
                && let Some(update) = update
            {
                app.groups.commit(update);
                sign_state(app, group).await;
            }
        }
        Err(e) => tracing::error!(error = %e, group, "the relay's own answer to a group request was refused"),
    }
}

/// Signs the group's state events anew (and its subgroups' metadata, whose `parent` shows only
/// while this group exists), stored as any event. Each is dated now, and never before the change
/// it shows (a client's clock a second ahead of ours); a second after the version it replaces
/// when that one is dated as late (several changes in one second): an addressable event of the
/// same second would be decided by its id.
async fn sign_state(app: &AppState, group: &str) {
    // Each group's id, when its last change was dated, and a state event of it.
    let events: Vec<(String, u64, StateEvent)> = {
        let groups = app.groups.read();
        let mut out = Vec::new();
        if let Some(g) = groups.get(group) {
            out.extend(state_events(g, &groups).into_iter().map(|e| (g.id.clone(), g.last.0.0, e)));
        }
        for child in groups.iter().filter(|g| g.metadata.parent.as_deref() == Some(group)) {
            if let Some(metadata) = state_events(child, &groups).into_iter().next() {
                out.push((child.id.clone(), child.last.0.0, metadata));
            }
        }
        out
    };
    let now = Timestamp::now();
    // Stored together: the writer commits them in one group, one sync for all of them.
    let signing = events.into_iter().map(|(id, changed, (kind, tags, content))| {
        let after = app.groups.signed_at(&id);
        async move {
            let earliest = now.0.max(changed);
            let mut at = Timestamp(after.map_or(earliest, |t| earliest.max(t + 1)));
            for _ in 0..3 {
                match crate::delivery::publish_own(app, app.keys.sign(at, kind, tags.clone(), &content)).await {
                    Ok(PutOutcome::Superseded) => at = Timestamp(at.0 + 1),
                    Ok(PutOutcome::Stored(_)) => {
                        app.groups.signed(&id, at.0);
                        break;
                    }
                    _ => break,
                }
            }
        }
    });
    futures_util::future::join_all(signing).await;
}

/// Removes the events `ids` that are `group`'s (a moderator of one group deletes nothing of
/// another's).
async fn remove_events(app: &AppState, group: &str, ids: &[EventId]) {
    for id in ids {
        let ours =
            app.store.get(id, Timestamp::now()).ok().flatten().and_then(|json| {
                serde_json::from_str::<Event>(json.as_str()).ok().filter(|e| group_of(e) == Some(group))
            });
        if ours.is_some()
            && let Err(e) = app.store.remove(*id).await
        {
            tracing::error!(error = %e, "removing a group's deleted event failed");
        }
    }
}

/// Removes every event of `group` and its state events, then tells its subgroups they are roots.
async fn remove_group(app: &AppState, group: &str) {
    let relay = app.keys.public_key();
    let filters = [
        Filter { tags: [('h', vec![group.to_string()])].into(), ..Filter::default() },
        Filter {
            kinds: Some((39000..=39009).map(Kind).collect()),
            authors: Some(vec![relay]),
            tags: [('d', vec![group.to_string()])].into(),
            ..Filter::default()
        },
    ];
    let mut ids = Vec::new();
    for filter in &filters {
        match app.store.export_async(filter.clone(), Timestamp::now()).await {
            Ok(export) => ids.extend(
                export.flatten().filter_map(|json| serde_json::from_str::<Event>(json.as_str()).ok().map(|e| e.id)),
            ),
            Err(e) => tracing::error!(error = %e, "listing a deleted group's events failed"),
        }
    }
    for id in ids {
        if let Err(e) = app.store.remove(id).await {
            tracing::error!(error = %e, "removing a deleted group's event failed");
        }
    }
    sign_state(app, group).await;
}
