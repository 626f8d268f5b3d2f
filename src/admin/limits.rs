//! `/admin/v1/limits` and per-pubkey tiers: read with sources, patch live, reset, persist.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use warp::http::{HeaderValue, StatusCode, header};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use crate::app::AppState;
use crate::config::{LimitKey, QuotaKey, Source, Tier};
use crate::http::{ApiError, RequestCtx, json_response, parse_body, require_json};
use crate::http::{Route, Segment, ctx, ctx_with_body, with_app};
use crate::limiter::Preview;
use crate::moderation::State;
use crate::protocol::PubKey;
use warp::Filter;
use warp::http::Method;

#[derive(Serialize)]
struct Valued {
    value: u64,
    source: Source,
}

/// Applies the saved overrides and tiers to the limiter: the next admission uses them.
fn apply(app: &AppState) {
    app.limiter.set_limits(app.moderation.effective_limits(&app.config.limits));
}

/// The limits document: every limit of every tier with its source.
type Document = BTreeMap<&'static str, BTreeMap<&'static str, Valued>>;

/// The document as the relay holds it now.
fn document(app: &AppState) -> Document {
    document_of(&app.moderation.snapshot(), app)
}

/// The document under `state` (the operators' overrides) and the configuration.
fn document_of(state: &State, app: &AppState) -> Document {
    let effective = state.effective_limits(&app.config.limits);
    let mut doc: BTreeMap<&'static str, BTreeMap<&'static str, Valued>> = BTreeMap::new();
    for key in LimitKey::all() {
        let source = if state.limit_overrides.contains_key(&key) {
            Source::Admin
        } else {
            app.config.sources.get(&key).copied().unwrap_or(Source::Default)
        };
        doc.entry(key.tier.as_str())
            .or_default()
            .insert(key.key.as_str(), Valued { value: effective.get(key), source });
    }
    doc
}

/// The document's entity tag: a strong validator of its values and sources (RFC 9110 §8.8.3),
/// so that two admins editing at once cannot overwrite each other unseen.
fn etag(doc: &Document) -> String {
    let bytes = serde_json::to_vec(doc).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    format!("\"{}\"", hex::encode(&digest[..8]))
}

/// The document with its `ETag`, as `status`.
fn with_etag(status: StatusCode, doc: &Document) -> Response {
    let mut response = json_response(status, doc);
    if let Ok(tag) = HeaderValue::from_str(&etag(doc)) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// Whether an `If-Match` header value admits the current tag (`*`, or one of a list of strong
/// tags; a weak tag never matches, RFC 9110 §13.1.1).
fn if_match_admits(if_match: &str, current: &str) -> bool {
    if_match.split(',').map(str::trim).any(|tag| tag == "*" || tag == current)
}

/// `GET /admin/v1/limits`, with its `ETag`.
pub async fn get(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    Ok(with_etag(StatusCode::OK, &document(&app)))
}

/// Validates a partial limits document into changes; nothing is applied when any field is
/// wrong.
fn validate(patch: &Value) -> Result<Vec<(LimitKey, u64)>, ApiError> {
    let tiers = patch.as_object().ok_or_else(|| ApiError::BadRequest("body must be an object of tiers".into()))?;
    let mut changes = Vec::new();
    for (tier_name, values) in tiers {
        let tier = Tier::parse(tier_name)
            .ok_or_else(|| ApiError::BadRequest(format!("unknown tier `{tier_name}` (expected human, agent or ip)")))?;
        let values = values
            .as_object()
            .ok_or_else(|| ApiError::BadRequest(format!("`{tier_name}` must be an object of limits")))?;
        for (name, value) in values {
            let key = QuotaKey::parse(name).map(|key| LimitKey { tier, key }).ok_or_else(|| {
                ApiError::BadRequest(format!("unknown limit `{tier_name}.{name}` ({})", valid_limits()))
            })?;
            match value.as_u64() {
                Some(v) if v > 0 && v <= key.key.max() => changes.push((key, v)),
                _ => {
                    return Err(ApiError::BadRequest(format!(
                        "`{key}` must be a positive integer of at most {}",
                        key.key.max()
                    )));
                }
            }
        }
    }
    Ok(changes)
}

fn current(app: &AppState, key: LimitKey) -> Value {
    json!(app.moderation.effective_limits(&app.config.limits).get(key))
}

/// `PATCH /admin/v1/limits` with e.g. `{"human": {"ws_events_per_sec": 20}}`: all of it or
/// nothing. With `If-Match`, only while the document is still the one of that tag: else 412 with
/// the current document and its tag, and nothing changes (the check and the change are one step,
/// so of two admins patching from the same tag exactly one succeeds).
pub async fn patch(app: Arc<AppState>, ctx: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let changes = validate(&parse_body(&ctx)?)?;
    let if_match = ctx.header("if-match").map(str::to_string);
    let applied = app
        .moderation
        .override_limits(&app.store, &app.config.limits, &changes, |s| {
            let before = document_of(s, &app);
            match &if_match {
                Some(if_match) if !if_match_admits(if_match, &etag(&before)) => Err(before),
                _ => Ok(()),
            }
        })
        .await?;
    let olds = match applied {
        Ok(olds) => olds,
        Err(current) => return Ok(with_etag(StatusCode::PRECONDITION_FAILED, &current)),
    };
    apply(&app);
    for ((key, value), old) in changes.iter().zip(olds) {
        audit(&app, &who, "limits.set", &key.to_string(), json!(old), json!(value)).await?;
    }
    Ok(with_etag(StatusCode::OK, &document(&app)))
}

/// `POST /admin/v1/limits/preview` with a PATCH-shaped body: how many of the tracked principals
/// the proposed values would refuse now, per quota, beside how many the limits in force refuse;
/// validated as a PATCH is, and nothing changes.
pub async fn preview(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let changes = validate(&parse_body(&ctx)?)?;
    // The limits the PATCH would give: its values as overrides, on a copy of the state.
    let mut state = app.moderation.snapshot();
    state.limit_overrides.extend(changes);
    let preview = app.limiter.preview(&state.effective_limits(&app.config.limits)).await;
    let per_quota = |counts: [u64; Preview::QUOTAS.len()], any: u64| {
        let mut out: serde_json::Map<String, Value> =
            Preview::QUOTAS.iter().zip(counts).map(|(quota, n)| (quota.as_str().to_string(), json!(n))).collect();
        out.insert("any".into(), json!(any));
        Value::Object(out)
    };
    ok_json(&json!({
        "tracked": preview.tracked,
        "would_refuse": per_quota(preview.would_refuse, preview.would_refuse_any),
        "refused_now": per_quota(preview.refused_now, preview.refused_now_any),
    }))
}

/// `DELETE /admin/v1/limits/overrides[/{tier}/{key}]`: back to the configured values.
pub async fn reset(
    app: Arc<AppState>,
    _: RequestCtx,
    who: Admin,
    one: Option<(String, String)>,
) -> Result<Response, ApiError> {
    let keys: Vec<LimitKey> = match one {
        Some((tier, key)) => match (Tier::parse(&tier), QuotaKey::parse(&key)) {
            (Some(tier), Some(key)) => vec![LimitKey { tier, key }],
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "unknown limit `{tier}.{key}` (the tiers are human, agent and ip; {})",
                    valid_limits()
                )));
            }
        },
        None => app.moderation.snapshot().limit_overrides.keys().copied().collect(),
    };
    for key in keys {
        let old = current(&app, key);
        let removed = app.moderation.remove_limit_override(&app.store, key).await?;
        apply(&app);
        if removed.is_some() {
            audit(&app, &who, "limits.reset", &key.to_string(), old, current(&app, key)).await?;
        }
    }
    Ok(with_etag(StatusCode::OK, &document(&app)))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TierBody {
    tier: String,
}

/// `PUT /admin/v1/pubkeys/{pubkey}/tier` with `{"tier": "agent"}`.
pub async fn set_tier(app: Arc<AppState>, ctx: RequestCtx, who: Admin, pubkey: String) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let pk = PubKey::parse(&pubkey)
        .ok_or_else(|| ApiError::BadRequest("pubkey must be 64 hex characters or an npub".into()))?;
    let TierBody { tier } = parse_body(&ctx)?;
    // A pubkey is a human or an agent; the ip tier is an address's, not a key's.
    let agent = match Tier::parse(&tier) {
        Some(Tier::Agent) => true,
        Some(Tier::Human) => false,
        _ => return Err(ApiError::BadRequest(format!("unknown tier `{tier}` (expected human or agent)"))),
    };
    let principal = crate::limiter::Principal::Pubkey(pk);
    let old = app.limiter.tier(&principal);
    app.moderation.set_tier(&app.store, pk, agent).await?;
    apply(&app);
    let new = app.limiter.tier(&principal);
    audit(&app, &who, "tier.set", &pk.to_hex(), json!(old), json!(new)).await?;
    ok_json(&json!({"pubkey": pk.to_hex(), "tier": new}))
}

/// The limits a tier has, for a refusal that names an unknown one.
fn valid_limits() -> String {
    let names: Vec<&str> = QuotaKey::ALL.iter().map(|k| k.as_str()).collect();
    format!("the limits are {}", names.join(", "))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/limits
    let get_limits = super::route::at(app, Method::GET, "limits", None, get);
    // PATCH /admin/v1/limits
    let patch_limits = super::route::at(app, Method::PATCH, "limits", Some(limit), patch);
    // POST /admin/v1/limits/preview
    let preview_limits = base
        .and(warp::path!("limits" / "preview"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, preview));
    // DELETE /admin/v1/limits/overrides
    let reset_all = base
        .and(warp::path!("limits" / "overrides"))
        .and(warp::delete())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, |a, c, w| reset(a, c, w, None)));
    // DELETE /admin/v1/limits/overrides/{tier}/{key}
    let reset_one = base
        .and(warp::path!("limits" / "overrides" / Segment / Segment))
        .and(warp::delete())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(tier), Segment(key), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| reset(a, c, w, Some((tier, key))))
        });
    // PUT /admin/v1/pubkeys/{pubkey}/tier
    let set_tier = base
        .and(warp::path!("pubkeys" / Segment / "tier"))
        .and(warp::put())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|Segment(pubkey), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| set_tier(a, c, w, pubkey))
        });
    vec![get_limits, patch_limits, preview_limits.boxed(), reset_all.boxed(), reset_one.boxed(), set_tier.boxed()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field_and_accepts_only_positive_integers() {
        assert_eq!(
            validate(&json!({"human": {"ws_events_per_sec": 20}})).unwrap(),
            vec![(LimitKey { tier: Tier::Human, key: QuotaKey::WsEventsPerSec }, 20)]
        );
        for (patch, named) in [
            (json!({"robot": {}}), "robot"),
            (json!({"human": {"nope": 1}}), "human.nope"),
            (json!({"agent": {"messages_per_min": 0}}), "agent.messages_per_min"),
            (json!({"agent": {"messages_per_min": -3}}), "agent.messages_per_min"),
            (json!({"agent": {"messages_per_min": 1.5}}), "agent.messages_per_min"),
            (json!({"agent": {"messages_per_min": "7"}}), "agent.messages_per_min"),
        ] {
            let err = validate(&patch).unwrap_err().to_string();
            assert!(err.contains(named), "{patch}: {err}");
        }
    }

    #[test]
    fn tier_serializes_lowercase() {
        assert_eq!(json!(Tier::Agent), json!("agent"));
    }
}
