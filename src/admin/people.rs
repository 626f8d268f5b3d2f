//! Who a pubkey is, as the admin page shows people: the name and picture of its kind 0 where
//! the store has one, beside the hex.
//!
//! Owns [`profiles`], which the groups', media and reports views share, and
//! `GET /admin/v1/profiles?pubkeys=<hex>,…`, which gives the admin page the same for any key it
//! shows (members, bans, usage).

use std::collections::HashMap;

use serde_json::Value;

use crate::app::AppState;
use crate::http::Route;
use crate::protocol::{Filter, Kind, PubKey, Timestamp, Viewer};
use std::sync::Arc;
use warp::http::Method;

/// The names and pictures of `pubkeys` from their stored kind 0.
pub(super) async fn profiles(app: &AppState, pubkeys: Vec<PubKey>) -> HashMap<PubKey, (String, String)> {
    let mut out = HashMap::new();
    if pubkeys.is_empty() {
        return out;
    }
    let filter = Filter { kinds: Some(vec![Kind(0)]), authors: Some(pubkeys), ..Filter::default() };
    let Ok((events, _)) = app.store.query_async(vec![filter], Timestamp::now(), Viewer::everything()).await else {
        return out;
    };
    for json in events {
        let Ok(event) = serde_json::from_str::<crate::protocol::Event>(json.as_str()) else { continue };
        let profile: Value = serde_json::from_str(&event.content).unwrap_or(Value::Null);
        let text = |k: &str| profile[k].as_str().unwrap_or("").to_string();
        let name = Some(text("display_name")).filter(|n| !n.is_empty()).unwrap_or_else(|| text("name"));
        out.entry(event.pubkey).or_insert((name, text("picture")));
    }
    out
}

/// Who `pk` is, as the API shows a person: `{pubkey, name, picture}` from `people` (what
/// [`profiles`] found; empty strings where the store has no kind 0).
pub(super) fn person(people: &HashMap<PubKey, (String, String)>, pk: &PubKey) -> Value {
    let (name, picture) = people.get(pk).cloned().unwrap_or_default();
    serde_json::json!({"pubkey": pk.to_hex(), "name": name, "picture": picture})
}

/// Keys looked up at most per call.
const MAX_LOOKUP: usize = 500;

/// `GET /admin/v1/profiles?pubkeys=<hex>,<hex>…`: `{"profiles": {<hex>: {name, picture}}}` for
/// the keys the store holds a kind 0 of (others are left out).
pub async fn lookup(
    app: std::sync::Arc<AppState>,
    ctx: crate::http::RequestCtx,
    _: super::auth::Admin,
) -> Result<warp::reply::Response, crate::http::ApiError> {
    let asked = ctx.query_param("pubkeys").unwrap_or_default();
    let mut keys = Vec::new();
    for hex in asked.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let pk = PubKey::from_hex(hex)
            .ok_or_else(|| crate::http::ApiError::BadRequest(format!("`{hex}` is not a 64-hex pubkey")))?;
        keys.push(pk);
    }
    if keys.len() > MAX_LOOKUP {
        return Err(crate::http::ApiError::BadRequest(format!("at most {MAX_LOOKUP} pubkeys at once")));
    }
    let found = profiles(&app, keys).await;
    let out: serde_json::Map<String, Value> = found
        .into_iter()
        .map(|(pk, (name, picture))| (pk.to_hex(), serde_json::json!({"name": name, "picture": picture})))
        .collect();
    super::auth::ok_json(&serde_json::json!({ "profiles": out }))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, _limit: u64) -> Vec<Route> {
    let _base = super::route::base();
    // GET /admin/v1/profiles
    let profiles = super::route::at(app, Method::GET, "profiles", None, lookup);
    vec![profiles]
}
