//! `GET /admin/v1/backup`: the whole community (the relay's key, settings, audit log, events,
//! blobs) as the JSON lines of [`crate::backup::Part`], ending with the manifest; what
//! `hearth backup DIR --relay URL` writes into its folder.

use std::sync::Arc;

use bytes::Bytes;
use warp::Reply;
use warp::http::header::{CONTENT_TYPE, HeaderValue};
use warp::reply::Response;

use super::auth::{Admin, audit};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx};

/// Bytes of JSON lines sent at once.
const CHUNK: usize = 256 * 1024;
/// Chunks read ahead of a slow download.
const READ_AHEAD: usize = 4;

/// `GET /admin/v1/backup`: streams every part of the community, the manifest last (a body that
/// ends without it was cut off). The events are those stored when the request arrives; writes go
/// on meanwhile. The body holds the relay's secret key: fetch it over TLS or on loopback only.
pub async fn backup(app: Arc<AppState>, _: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    audit(&app, &who, "backup", "community", serde_json::Value::Null, serde_json::json!("started")).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut chunk = Vec::with_capacity(CHUNK);
        let outcome = crate::backup::read_out(&app, &mut |part| {
            serde_json::to_writer(&mut chunk, &part).map_err(|e| crate::backup::BackupError::Io(e.into()))?;
            chunk.push(b'\n');
            // A client that went away stops the backup.
            if chunk.len() >= CHUNK && tx.blocking_send(Ok(Bytes::from(std::mem::take(&mut chunk)))).is_err() {
                return Err(crate::backup::BackupError::Gone);
            }
            Ok(())
        });
        match outcome {
            Ok(_) => {
                let _ = tx.blocking_send(Ok(Bytes::from(chunk)));
            }
            Err(crate::backup::BackupError::Gone) => {}
            Err(e) => {
                tracing::error!(error = %e, "a backup stopped before its end");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let mut response = warp::reply::stream(body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    Ok(response)
}
