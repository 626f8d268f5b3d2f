//! NIP-86 relay management JSON-RPC: `{"method": …, "params": […]}` → `{"result": …, "error": …}`.
//!
//! Owns the method table. Every change is persisted through [`crate::moderation`] and written to
//! the audit log; a banned event is also removed from the store.

use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, internal, parse_body};
use crate::http::{Route, ctx_with_body, require_media_type, with_app};
use crate::moderation::InfoField;
use crate::protocol::EventId;
use crate::protocol::PubKey;
use warp::Filter;
use warp::http::Method;

/// The content type NIP-86 requests at `POST /` carry.
pub const MEDIA_TYPE: &str = "application/nostr+json+rpc";

/// The methods hearth implements.
pub const METHODS: &[&str] = &[
    "supportedmethods",
    "banpubkey",
    "unbanpubkey",
    "listbannedpubkeys",
    "allowpubkey",
    "unallowpubkey",
    "listallowedpubkeys",
    "listeventsneedingmoderation",
    "allowevent",
    "banevent",
    "listbannedevents",
    "changerelayname",
    "changerelaydescription",
    "changerelayicon",
    "allowkind",
    "disallowkind",
    "listallowedkinds",
    "blockip",
    "unblockip",
    "listblockedips",
];

#[derive(Deserialize)]
struct RpcRequest {
    method: String,
    #[serde(default)]
    params: Vec<Value>,
}

#[derive(Serialize)]
struct RpcResponse {
    result: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// A method's failure, reported in the `error` field.
struct RpcError(String);

fn param_str(params: &[Value], i: usize, what: &str) -> Result<String, RpcError> {
    params
        .get(i)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| RpcError(format!("params[{i}] must be the {what}")))
}

fn reason(params: &[Value]) -> String {
    params.get(1).and_then(Value::as_str).unwrap_or("").to_string()
}

/// `POST /` (NIP-86) and `POST /admin/v1/rpc`.
pub async fn handle(app: Arc<AppState>, ctx: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    let req: RpcRequest = parse_body(&ctx)?;
    let response = match call(&app, &who, &req.method, &req.params).await {
        Ok(result) => RpcResponse { result, error: None },
        Err(RpcError(e)) => RpcResponse { result: Value::Null, error: Some(e) },
    };
    ok_json(&response)
}

async fn call(app: &AppState, who: &Admin, method: &str, params: &[Value]) -> Result<Value, RpcError> {
    let store = &app.store;
    let m = &app.moderation;
    let failed = |e: ApiError| RpcError(e.to_string());
    let pubkey = |i| {
        let text = param_str(params, i, "pubkey")?;
        PubKey::parse(&text).ok_or_else(|| RpcError(format!("`{text}` is not a hex pubkey or npub")))
    };
    let event_id = |i| {
        let text = param_str(params, i, "event id")?;
        EventId::from_hex(&text).ok_or_else(|| RpcError(format!("`{text}` is not a 64-hex event id")))
    };
    let ip = |i| {
        let text = param_str(params, i, "IP address")?;
        text.parse::<IpAddr>().map_err(|_| RpcError(format!("`{text}` is not an IP address")))
    };
    let kind = |i| match params.get(i).and_then(Value::as_u64) {
        Some(k) if k <= u64::from(u16::MAX) => Ok(k as u16),
        _ => Err(RpcError(format!("params[{i}] must be a kind number"))),
    };
    let update = |change: &'static str, target: String, old: Value, new: Value| async move {
        audit(app, who, change, &target, old, new).await.map_err(failed)
    };
    match method {
        "supportedmethods" => Ok(json!(METHODS)),
        "listeventsneedingmoderation" => {
            let queue = super::reports::queue(app).await.map_err(failed)?;
            Ok(json!(
                queue
                    .iter()
                    .filter(|e| e.of == super::reports::Target::Event)
                    .map(|e| json!({"id": e.target, "reason": e.reason()}))
                    .collect::<Vec<_>>()
            ))
        }
        "banpubkey" => {
            let (pk, why) = (pubkey(0)?, reason(params));
            let old = m.ban_key(store, pk, why.clone()).await.map_err(|e| failed(e.into()))?;
            update("banpubkey", pk.to_hex(), json!(old), json!(why)).await?;
            Ok(json!(true))
        }
        "unbanpubkey" => {
            let pk = pubkey(0)?;
            let old = m.unban_key(store, pk).await.map_err(|e| failed(e.into()))?;
            update("unbanpubkey", pk.to_hex(), json!(old), Value::Null).await?;
            Ok(json!(true))
        }
        "listbannedpubkeys" => Ok(json!(
            m.snapshot().banned_pubkeys.iter().map(|(pk, r)| json!({"pubkey": pk, "reason": r})).collect::<Vec<_>>()
        )),
        "allowpubkey" => {
            let (pk, why) = (pubkey(0)?, reason(params));
            let old = m.add_member(store, pk, why.clone()).await.map_err(|e| failed(internal(e)))?;
            update("allowpubkey", pk.to_hex(), json!(old), json!(why)).await?;
            if old.is_none() {
                crate::membership::changed(app, pk, true).await;
            }
            Ok(json!(true))
        }
        "unallowpubkey" => {
            let pk = pubkey(0)?;
            let old = m.remove_member(store, pk).await.map_err(|e| failed(e.into()))?;
            update("unallowpubkey", pk.to_hex(), json!(old), Value::Null).await?;
            if old.is_some() {
                crate::membership::changed(app, pk, false).await;
            }
            Ok(json!(true))
        }
        "listallowedpubkeys" => Ok(json!(
            m.snapshot().allowed_pubkeys.iter().map(|(pk, r)| json!({"pubkey": pk, "reason": r})).collect::<Vec<_>>()
        )),
        "banevent" => {
            let (id, why) = (event_id(0)?, reason(params));
            let old = m.ban_event(store, id, why.clone()).await.map_err(|e| failed(e.into()))?;
            store.remove(id).await.map_err(|e| failed(internal(e)))?;
            super::reports::reviewed(app, &id.to_hex(), "delete").await.map_err(failed)?;
            update("banevent", id.to_hex(), json!(old), json!(why)).await?;
            Ok(json!(true))
        }
        "allowevent" => {
            let id = event_id(0)?;
            let old = m.unban_event(store, id).await.map_err(|e| failed(e.into()))?;
            super::reports::reviewed(app, &id.to_hex(), "dismiss").await.map_err(failed)?;
            update("allowevent", id.to_hex(), json!(old), Value::Null).await?;
            Ok(json!(true))
        }
        "listbannedevents" => Ok(json!(
            m.snapshot().banned_events.iter().map(|(id, r)| json!({"id": id, "reason": r})).collect::<Vec<_>>()
        )),
        "changerelayname" | "changerelaydescription" | "changerelayicon" => {
            let value = param_str(params, 0, "new value")?;
            let field = match method {
                "changerelayname" => InfoField::Name,
                "changerelaydescription" => InfoField::Description,
                _ => InfoField::Icon,
            };
            let old = m.set_info(store, field, value.clone()).await.map_err(|e| failed(internal(e)))?;
            update("relayinfo", method.to_string(), json!(old), json!(value)).await?;
            Ok(json!(true))
        }
        "allowkind" | "disallowkind" => {
            let k = kind(0)?;
            let allow = method == "allowkind";
            let changed = m.allow_kind(store, k, allow).await.map_err(|e| failed(internal(e)))?;
            if changed {
                update(if allow { "allowkind" } else { "disallowkind" }, k.to_string(), json!(!allow), json!(allow))
                    .await?;
            }
            Ok(json!(true))
        }
        "listallowedkinds" => Ok(json!(m.snapshot().allowed_kinds)),
        "blockip" => {
            let (addr, why) = (ip(0)?, reason(params));
            let old = m.block_ip(store, addr, why.clone()).await.map_err(|e| failed(e.into()))?;
            update("blockip", addr.to_string(), json!(old), json!(why)).await?;
            Ok(json!(true))
        }
        "unblockip" => {
            let addr = ip(0)?;
            let old = m.unblock_ip(store, addr).await.map_err(|e| failed(e.into()))?;
            update("unblockip", addr.to_string(), json!(old), Value::Null).await?;
            Ok(json!(true))
        }
        "listblockedips" => {
            Ok(json!(m.snapshot().blocked_ips.iter().map(|(ip, r)| json!({"ip": ip, "reason": r})).collect::<Vec<_>>()))
        }
        other => Err(RpcError(format!("unsupported method `{other}`"))),
    }
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let _base = super::route::base();
    // POST /admin/v1/rpc (NIP-86 methods for bearer-token callers too)
    let rpc = super::route::at(app, Method::POST, "rpc", Some(limit), handle);
    // POST / with Content-Type: application/nostr+json+rpc (NIP-86; 415 with another type)
    let nip86_root = warp::path::end().and(warp::post()).and(with_app(app.clone())).and(ctx_with_body(limit)).and_then(
        |app, ctx: RequestCtx| async move {
            match require_media_type(&ctx, MEDIA_TYPE) {
                Ok(()) => run(app, ctx, Accept::Nip98, handle).await,
                Err(e) => Ok(e.into_response()),
            }
        },
    );
    vec![rpc, nip86_root.boxed()]
}
