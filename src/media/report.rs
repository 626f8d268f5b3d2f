//! `PUT /report` (BUD-09): a NIP-56 report of blobs held here, taken into the review queue.
//!
//! Owns reading the report: a signed kind 1984 event, at most 64 KiB, whose `x` tags name blobs
//! this relay holds. It is published through the one publish path like any report (so it is
//! sealed to its author and the admins, billed, and refused in the modes that refuse the
//! reporter's writes), and the admin API's queue lists each blob it names
//! (`admin/reports.rs`), where an admin may delete the blob and ban its uploader.

use http_body_util::BodyExt;
use warp::http::StatusCode;

use super::access;
use super::reply::{MediaError, json};
use crate::app::AppState;
use crate::gate;
use crate::http::RequestCtx;
use crate::http::front::FrontResponse;
use crate::ingest::{Outcome, Publisher};
use crate::protocol::blossom::BlobHash;
use crate::protocol::private::REPORT;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, nip42::RelayMatch};

/// The largest report body read.
const MAX_BODY: usize = 64 * 1024;

/// What to send instead, said with each refusal of the body.
const SHAPE: &str =
    "send a signed kind 1984 event (NIP-56) with an [\"x\", \"<sha256>\", \"<report type>\"] tag per blob";

/// `PUT /report`.
pub async fn put(app: &AppState, ctx: &RequestCtx, body: hyper::body::Incoming) -> Result<FrontResponse, MediaError> {
    let billed = access::by_address(app, ctx).await?;
    let bytes = http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|_| MediaError::TooLarge(format!("a report is at most {MAX_BODY} bytes; {SHAPE}")))?
        .to_bytes();
    let text = std::str::from_utf8(&bytes).map_err(|_| MediaError::BadRequest(format!("not UTF-8: {SHAPE}")))?;
    let event = Event::from_json(text).map_err(|e| MediaError::BadRequest(format!("{e}: {SHAPE}")))?;
    if event.kind != REPORT {
        return Err(MediaError::BadRequest(format!("kind {} is not a report: {SHAPE}", event.kind.0)));
    }
    let hashes: Vec<BlobHash> = event.tag_values("x").filter_map(BlobHash::from_hex).collect();
    if hashes.is_empty() {
        return Err(MediaError::BadRequest(format!("the report names no blob: {SHAPE}")));
    }
    for hash in &hashes {
        if app.blobs.record(hash)?.is_none() {
            return Err(MediaError::NotFound(format!("no blob {} is held here", hash.to_hex())));
        }
    }
    if let Some(refusal) = gate::door(app, &event, None) {
        return Err(MediaError::Forbidden(refusal.to_string()));
    }
    let relay = RelayMatch::of(&app.config.server.public_url, ctx.header("host").map(str::to_string));
    let outcome = gate::publish(app, event, Publisher { authed: None, billed, relay }).await;
    match outcome {
        Outcome::Accepted | Outcome::Duplicate | Outcome::AlreadyMember => {
            Ok(json(StatusCode::OK, &serde_json::json!({ "message": "reported", "blobs": hashes.len() })))
        }
        Outcome::Refused(Refusal::RateLimited(limited)) => Err(MediaError::Limited(limited)),
        Outcome::Refused(Refusal::Rejected { prefix: Prefix::Invalid | Prefix::Duplicate, text }) => {
            Err(MediaError::BadRequest(text))
        }
        Outcome::Refused(refusal @ Refusal::Rejected { prefix: Prefix::Error, .. }) => {
            Err(MediaError::Unavailable(refusal.to_string()))
        }
        Outcome::Refused(refusal) => Err(MediaError::Forbidden(refusal.to_string())),
    }
}
