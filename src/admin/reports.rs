//! `/admin/v1/reports…`: the review queue of NIP-56 reports, and an admin's decision on each.
//!
//! Owns the queue: every stored kind 1984 report (read with the operator's view: reports are
//! sealed to their author and the admins on every other read path) against an event stored
//! here, a key with events here or a blob held here, grouped by target (each blob held here of its
//! `x` tags, as BUD-09's `PUT /report` sends them; else the event of its first `e` tag; else the
//! key of its first `p` tag), newest first, each with the reported event, its author's kind 0
//! name and picture, the report types and their counts; reports made before an admin decided on
//! their target leave it. And the decisions: dismiss, delete the event (or the blob, every
//! upload of it), ban the key (the blob's first uploader for a blob; with its reach: this event
//! or blob, every event and blob of theirs, their future writes), each audited and kept in the
//! moderation document (`reviewed`) every node shares. NIP-86's `listeventsneedingmoderation`,
//! `allowevent` and `banevent` work over the same queue.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use super::people::{person, profiles};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, internal, parse_body};
use crate::http::{Route, Segment, ctx_with_body, with_app};
use crate::moderation::Reviewed;
use crate::protocol::blossom::BlobHash;
use crate::protocol::private::REPORT;
use crate::protocol::{Event, EventId, Filter, PubKey, Timestamp, Viewer};
use crate::store::media::BlobRecord;
use warp::Filter as _;
use warp::http::Method;

/// The newest reports read for the queue.
const MAX_REPORTS: u64 = 10_000;
/// A page of the queue holds at most this many targets.
const MAX_PAGE: usize = 500;

/// What a report is about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Target {
    /// An event (the report's first `e` tag).
    Event,
    /// A key (its first `p` tag, without an `e` or `x` tag).
    #[default]
    Key,
    /// A blob held here (each of its `x` tags: BUD-09's `PUT /report`, or a NIP-56 report
    /// naming media).
    Blob,
}

/// One target of the queue.
#[derive(Debug, Default)]
pub(super) struct Entry {
    /// An event id, a pubkey or a blob's SHA-256, hex.
    pub(super) target: String,
    /// What the target is.
    pub(super) of: Target,
    /// The event reported, when the target is one.
    event: Option<Event>,
    /// The blob's uploads, oldest first, when the target is one.
    blob: Vec<BlobRecord>,
    /// The event is held (`moderation.hold_after_reports`): off every read path.
    held: bool,
    /// The key reported: the event's author, or the target.
    pubkey: Option<PubKey>,
    types: BTreeMap<String, u64>,
    reporters: Vec<PubKey>,
    comments: Vec<String>,
    count: u64,
    latest: u64,
}

impl Entry {
    /// The report types, most frequent first, as NIP-86 gives a reason.
    pub(super) fn reason(&self) -> String {
        let mut types: Vec<(&String, &u64)> = self.types.iter().collect();
        types.sort_by(|a, b| b.1.cmp(a.1));
        types.iter().map(|(t, n)| format!("{t} ×{n}")).collect::<Vec<_>>().join(", ")
    }
}

/// The queue now, newest first.
pub(super) async fn queue(app: &AppState) -> Result<Vec<Entry>, ApiError> {
    let filter = Filter { kinds: Some(vec![REPORT]), limit: Some(MAX_REPORTS), ..Filter::default() };
    let (reports, _) =
        app.store.query_async(vec![filter], Timestamp::now(), Viewer::everything()).await.map_err(internal)?;
    let reviewed = app.moderation.snapshot().reviewed;
    let mut by_target: BTreeMap<String, Entry> = BTreeMap::new();
    for json in reports {
        let Ok(report) = serde_json::from_str::<Event>(json.as_str()) else { continue };
        let held = |hash: &BlobHash| app.blobs.record(hash).ok().flatten().is_some();
        for (target, kind_of_report, of) in targets(&report, held) {
            if reviewed.get(&target).is_some_and(|r| r.at >= report.created_at.0) {
                continue;
            }
            let entry = by_target.entry(target.clone()).or_insert_with(|| Entry { target, of, ..Entry::default() });
            *entry.types.entry(kind_of_report.unwrap_or_else(|| "other".into())).or_default() += 1;
            if !entry.reporters.contains(&report.pubkey) {
                entry.reporters.push(report.pubkey);
            }
            if !report.content.is_empty() {
                entry.comments.push(report.content.clone());
            }
            entry.count += 1;
            entry.latest = entry.latest.max(report.created_at.0);
        }
    }
    let mut out = Vec::new();
    for (_, mut entry) in by_target {
        if let Some(hash) = BlobHash::from_hex(&entry.target).filter(|_| entry.of == Target::Blob) {
            // Only reports of blobs this relay holds.
            entry.blob = app.blobs.records().owners_of(&hash.0).map_err(internal)?;
            let Some(first) = entry.blob.first() else { continue };
            entry.pubkey = Some(first.owner);
        } else if let Some(id) = EventId::from_hex(&entry.target).filter(|_| entry.of == Target::Event) {
            // Only reports of events this relay holds.
            let Some(json) = app.store.get(&id, Timestamp::now()).map_err(internal)? else { continue };
            entry.held = app.moderation.is_held(&id);
            let json = json.as_str().to_string();
            let event: Event = serde_json::from_str(&json).map_err(internal)?;
            entry.pubkey = Some(event.pubkey);
            entry.event = Some(event);
        } else if let Some(pk) = PubKey::from_hex(&entry.target).filter(|_| entry.of == Target::Key) {
            // Only reports of keys this relay holds events of (or its members).
            if app.store.count_by_author_async(pk).await.map_err(internal)? == 0 && !app.moderation.is_member(&pk) {
                continue;
            }
            entry.pubkey = Some(pk);
        } else {
            continue;
        }
        out.push(entry);
    }
    out.sort_by(|a, b| b.latest.cmp(&a.latest).then_with(|| a.target.cmp(&b.target)));
    Ok(out)
}

/// What `report` is about, each with its report type: every blob of its `x` tags that is `held`
/// here, else the event of its first `e` tag, else the key of its first `p` tag.
fn targets(report: &Event, held: impl Fn(&BlobHash) -> bool) -> Vec<(String, Option<String>, Target)> {
    let named = |t: &Vec<String>| (t.get(1).cloned().unwrap_or_default(), t.get(2).cloned());
    let tagged = |name: &'static str| report.tags.iter().filter(move |t| t.first().map(String::as_str) == Some(name));
    let blobs: Vec<_> = tagged("x")
        .map(named)
        .filter(|(hash, _)| BlobHash::from_hex(hash).is_some_and(|h| held(&h)))
        .map(|(hash, kind)| (hash.to_ascii_lowercase(), kind, Target::Blob))
        .collect();
    if !blobs.is_empty() {
        return blobs;
    }
    match (tagged("e").next(), tagged("p").next()) {
        (Some(e), _) => vec![(named(e).0, named(e).1, Target::Event)],
        (None, Some(p)) => vec![(named(p).0, named(p).1, Target::Key)],
        (None, None) => Vec::new(),
    }
}

/// `GET /admin/v1/reports?limit=N&after=<target>`: the queue, a page at a time.
pub async fn list(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let limit = ctx.query_count("limit", 100, MAX_PAGE)?.max(1);
    let after = ctx.query_param("after");
    let all = queue(&app).await?;
    let start = after.as_deref().and_then(|a| all.iter().position(|e| e.target == a).map(|i| i + 1)).unwrap_or(0);
    let page: Vec<&Entry> = all.iter().skip(start).take(limit).collect();
    let next = (start + page.len() < all.len()).then(|| page.last().map(|e| e.target.clone())).flatten();
    let who: Vec<PubKey> = page.iter().flat_map(|e| e.pubkey.iter().chain(e.reporters.iter()).copied()).collect();
    let people = profiles(&app, who).await;
    let person = |pk: &PubKey| person(&people, pk);
    let reports: Vec<Value> = page
        .iter()
        .map(|e| {
            json!({
                "target": e.target,
                "type": match e.of { Target::Event => "event", Target::Key => "pubkey", Target::Blob => "blob" },
                "event": e.event,
                "blob": e.blob.first().map(|b| json!({
                    "sha256": b.sha256, "size": b.size, "type": b.media_type, "uploaded": b.uploaded,
                    "uploaders": e.blob.len(),
                })),
                "author": e.pubkey.as_ref().map(person),
                "banned": e.pubkey.as_ref().is_some_and(|pk| app.moderation.is_banned(pk)),
                "held": e.held,
                "count": e.count,
                "types": e.types,
                "reporters": e.reporters.iter().map(person).collect::<Vec<_>>(),
                "comments": e.comments,
                "latest": e.latest,
            })
        })
        .collect();
    ok_json(&json!({"reports": reports, "total": all.len(), "next": next}))
}

/// The body of a decision: how far a ban reaches, and the reason recorded.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Decision {
    /// `event` (this event), `events` (every event of the key, and its future writes) or
    /// `writes` (its future writes); for `ban`.
    reach: Option<String>,
    reason: String,
}

/// `POST /admin/v1/reports/{target}/{dismiss|delete|ban}`.
pub async fn decide(
    app: Arc<AppState>,
    ctx: RequestCtx,
    who: Admin,
    (target, action): (String, String),
) -> Result<Response, ApiError> {
    let decision: Decision = if ctx.body.is_empty() { Decision::default() } else { parse_body(&ctx)? };
    let entry = queue(&app).await?.into_iter().find(|e| e.target == target);
    let Some(entry) = entry else {
        return Err(ApiError::NotFound(format!("no report waits for `{target}`")));
    };
    let why =
        if decision.reason.is_empty() { format!("reported: {}", entry.reason()) } else { decision.reason.clone() };
    let store = &app.store;
    let blob = BlobHash::from_hex(&target).filter(|_| entry.of == Target::Blob);
    let done = match (action.as_str(), decision.reach.as_deref()) {
        ("dismiss", None) => json!({"dismissed": target}),
        ("delete", None) | ("ban", Some("event")) if blob.is_some() => {
            if let Some(hash) = &blob {
                app.blobs.remove(hash, None).await.map_err(internal)?;
            }
            json!({"deleted": target})
        }
        ("delete", None) | ("ban", Some("event")) => {
            let Some(event) = &entry.event else {
                return Err(ApiError::BadRequest(format!(
                    "`{target}` is a key, not an event: dismiss it or ban the key"
                )));
            };
            app.moderation.ban_event(store, event.id, why.clone()).await.map_err(internal)?;
            store.remove(event.id).await.map_err(internal)?;
            json!({"deleted": event.id.to_hex()})
        }
        ("ban", Some(reach @ ("events" | "writes"))) => {
            let pk = entry.pubkey.ok_or_else(|| internal("a queued report without a key"))?;
            app.moderation.ban_key(store, pk, why.clone()).await.map_err(internal)?;
            let every = Filter { authors: Some(vec![pk]), ..Filter::default() };
            let removed = if reach == "events" {
                crate::vanish::remove_matching(&app, every, None).await.map_err(internal)?
            } else {
                0
            };
            // A blob reported: gone with the ban; with `events`, every blob of the key's as well.
            if let Some(hash) = &blob {
                app.blobs.remove(hash, None).await.map_err(internal)?;
            }
            if reach == "events" && blob.is_some() {
                app.blobs.remove_owner(&pk).await.map_err(internal)?;
            }
            json!({"banned": pk.to_hex(), "reach": reach, "removed": removed})
        }
        ("ban", _) => {
            return Err(ApiError::BadRequest("a ban needs {\"reach\": \"event\" | \"events\" | \"writes\"}".into()));
        }
        ("dismiss" | "delete", Some(_)) => return Err(ApiError::BadRequest("reach is for a ban only".into())),
        _ => return Err(ApiError::NotFound("the actions are dismiss, delete and ban".into())),
    };
    if let Some(event) = entry.event.as_ref().filter(|_| entry.held) {
        crate::report_hold::release(&app, event.id).await.map_err(internal)?;
    }
    let at = Timestamp::now().0;
    let reviewed = Reviewed { action: action.clone(), at };
    app.moderation.review(store, target.clone(), reviewed).await.map_err(internal)?;
    audit(
        &app,
        &who,
        &format!("report.{action}"),
        &target,
        json!({"count": entry.count, "types": entry.types}),
        done.clone(),
    )
    .await?;
    ok_json(&done)
}

/// Marks `target` decided (`action`) now: NIP-86's `allowevent` and `banevent` answer the queue
/// (an event held for review is no longer held).
pub(super) async fn reviewed(app: &AppState, target: &str, action: &str) -> Result<(), ApiError> {
    if let Some(id) = EventId::from_hex(target) {
        crate::report_hold::release(app, id).await.map_err(internal)?;
    }
    let r = Reviewed { action: action.into(), at: Timestamp::now().0 };
    app.moderation.review(&app.store, target.to_string(), r).await.map_err(internal)?;
    Ok(())
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/reports
    let reports_list = super::route::at(app, Method::GET, "reports", None, list);
    // POST /admin/v1/reports/{target}/{action}
    let reports_decide = base
        .and(warp::path!("reports" / Segment / Segment))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|Segment(target), Segment(action), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| decide(a, c, w, (target, action)))
        });
    vec![reports_list, reports_decide.boxed()]
}
