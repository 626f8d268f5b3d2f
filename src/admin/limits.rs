//! `/admin/v1/limits` and per-pubkey tiers: read with sources, patch live, reset, persist.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use warp::reply::Response;

use super::{Admin, audit, internal, ok_json};
use crate::app::AppState;
use crate::config::{Config, Source, parse_pubkey};
use crate::rest::{ApiError, RequestCtx, parse_body, require_json};

const TIERS: [&str; 2] = ["human", "agent"];

#[derive(Serialize)]
struct Valued {
    value: u64,
    source: Source,
}

/// Applies the saved overrides and tiers to the limiter: the next admission uses them.
fn apply(app: &AppState) {
    app.limiter.set_limits(app.moderation.snapshot().effective_limits(&app.config.limits));
}

/// Every limit of every tier with its source.
fn document(app: &AppState) -> BTreeMap<&'static str, BTreeMap<&'static str, Valued>> {
    let state = app.moderation.snapshot();
    let effective = state.effective_limits(&app.config.limits);
    TIERS
        .iter()
        .map(|tier| {
            let values = Config::TIER_KEYS
                .iter()
                .map(|key| {
                    let dotted = format!("{tier}.{key}");
                    let source = if state.limit_overrides.contains_key(&dotted) {
                        Source::Admin
                    } else {
                        app.config.sources.get(&format!("limits.{dotted}")).copied().unwrap_or(Source::Default)
                    };
                    (*key, Valued { value: effective.tier(tier).get(key).unwrap_or(0), source })
                })
                .collect();
            (*tier, values)
        })
        .collect()
}

/// `GET /admin/v1/limits`
pub async fn get(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    ok_json(&document(&app))
}

/// Validates a partial limits document into `(tier.key, value)` pairs; nothing is applied when
/// any field is wrong.
fn validate(patch: &Value) -> Result<Vec<(String, u64)>, ApiError> {
    let tiers = patch.as_object().ok_or_else(|| ApiError::BadRequest("body must be an object of tiers".into()))?;
    let mut changes = Vec::new();
    for (tier, values) in tiers {
        if !TIERS.contains(&tier.as_str()) {
            return Err(ApiError::BadRequest(format!("unknown tier `{tier}` (expected human or agent)")));
        }
        let values =
            values.as_object().ok_or_else(|| ApiError::BadRequest(format!("`{tier}` must be an object of limits")))?;
        for (key, value) in values {
            if !Config::TIER_KEYS.contains(&key.as_str()) {
                return Err(ApiError::BadRequest(format!("unknown limit `{tier}.{key}`")));
            }
            match value.as_u64() {
                Some(v) if v > 0 => changes.push((format!("{tier}.{key}"), v)),
                _ => return Err(ApiError::BadRequest(format!("`{tier}.{key}` must be a positive integer"))),
            }
        }
    }
    Ok(changes)
}

fn current(app: &AppState, dotted: &str) -> Value {
    let effective = app.moderation.snapshot().effective_limits(&app.config.limits);
    match dotted.split_once('.') {
        Some((tier, key)) => json!(effective.tier(tier).get(key)),
        None => Value::Null,
    }
}

/// `PATCH /admin/v1/limits` with e.g. `{"human": {"ws_events_per_sec": 20}}`.
pub async fn patch(app: Arc<AppState>, ctx: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let changes = validate(&parse_body(&ctx)?)?;
    for (dotted, value) in changes {
        let old = current(&app, &dotted);
        app.moderation
            .update(&app.store, |s| s.limit_overrides.insert(dotted.clone(), value))
            .await
            .map_err(internal)?;
        apply(&app);
        audit(&app, &who, "limits.set", &dotted, old, json!(value)).await?;
    }
    ok_json(&document(&app))
}

/// `DELETE /admin/v1/limits/overrides[/{tier}/{key}]`: back to the configured values.
pub async fn reset(
    app: Arc<AppState>,
    _: RequestCtx,
    who: Admin,
    one: Option<(String, String)>,
) -> Result<Response, ApiError> {
    let keys: Vec<String> = match one {
        Some((tier, key)) => {
            if !TIERS.contains(&tier.as_str()) || !Config::TIER_KEYS.contains(&key.as_str()) {
                return Err(ApiError::BadRequest(format!("unknown limit `{tier}.{key}`")));
            }
            vec![format!("{tier}.{key}")]
        }
        None => app.moderation.snapshot().limit_overrides.keys().cloned().collect(),
    };
    for dotted in keys {
        let old = current(&app, &dotted);
        let removed =
            app.moderation.update(&app.store, |s| s.limit_overrides.remove(&dotted)).await.map_err(internal)?;
        apply(&app);
        if removed.is_some() {
            audit(&app, &who, "limits.reset", &dotted, old, current(&app, &dotted)).await?;
        }
    }
    ok_json(&document(&app))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TierBody {
    tier: String,
}

/// `PUT /admin/v1/pubkeys/{pubkey}/tier` with `{"tier": "agent"}`.
pub async fn set_tier(app: Arc<AppState>, ctx: RequestCtx, who: Admin, pubkey: String) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let pk = parse_pubkey(&pubkey)
        .ok_or_else(|| ApiError::BadRequest("pubkey must be 64 hex characters or an npub".into()))?;
    let TierBody { tier } = parse_body(&ctx)?;
    let agent = match tier.as_str() {
        "agent" => true,
        "human" => false,
        other => return Err(ApiError::BadRequest(format!("unknown tier `{other}` (expected human or agent)"))),
    };
    let principal = crate::limiter::Principal::Pubkey(pk);
    let old = app.limiter.tier(&principal);
    app.moderation.update(&app.store, |s| s.agent_overrides.insert(pk, agent)).await.map_err(internal)?;
    apply(&app);
    let new = app.limiter.tier(&principal);
    audit(&app, &who, "tier.set", &pk.to_hex(), json!(old), json!(new)).await?;
    ok_json(&json!({"pubkey": pk.to_hex(), "tier": new}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field_and_accepts_only_positive_integers() {
        assert_eq!(
            validate(&json!({"human": {"ws_events_per_sec": 20}})).unwrap(),
            vec![("human.ws_events_per_sec".to_string(), 20)]
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
        assert_eq!(json!(crate::limiter::Tier::Agent), json!("agent"));
    }
}
