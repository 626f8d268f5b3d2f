//! `GET /admin/v1/backup`: the whole community (the relay's key, settings, audit log, events,
//! blobs) as the JSON lines of [`crate::backup::Part`], ending with the manifest; what
//! `hearth backup DIR --relay URL` writes into its folder.

use std::sync::Arc;

use warp::reply::Response;

use super::auth::{Admin, audit};
use super::store::ndjson;
use crate::app::AppState;
use crate::backup::BackupError;
use crate::http::Route;
use crate::http::{ApiError, RequestCtx};
use warp::http::Method;

/// `GET /admin/v1/backup`: streams every part of the community, the manifest last (a body that
/// ends without it was cut off). The events are those stored when the request arrives; writes go
/// on meanwhile. The body holds the relay's secret key: fetch it over TLS or on loopback only.
pub async fn backup(app: Arc<AppState>, _: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    audit(&app, &who, "backup", "community", serde_json::Value::Null, serde_json::json!("started")).await?;
    Ok(ndjson("a backup", move |send| {
        let outcome = crate::backup::read_out(&app, &mut |part| {
            let line = serde_json::to_vec(&part).map_err(|e| BackupError::Io(e.into()))?;
            // A client that went away stops the backup.
            if send(&line) { Ok(()) } else { Err(BackupError::Gone) }
        });
        match outcome {
            Ok(_) | Err(BackupError::Gone) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, _limit: u64) -> Vec<Route> {
    let _base = super::route::base();
    // GET /admin/v1/backup
    let backup_route = super::route::at(app, Method::GET, "backup", None, backup);
    vec![backup_route]
}
