//! `hearth import`: JSON lines of signed events into the data directory, by the publish rules.
//!
//! A reader thread reads lines in batches and checks each batch's signatures on every core
//! while the previous batch is being stored; the stores happen in input order (a deletion or a
//! newer version decides as it would have live), many in flight so the writer commits them in
//! groups. No quota is billed. A bad line is reported on stderr with its number and the import
//! goes on.

use std::io::{BufRead, IsTerminal};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::Serialize;

use super::dir::{OfflineError, open};
use crate::app::AppState;
use crate::config::Config;
use crate::ingest::{Settled, settle};
use crate::protocol::verify::verify;
use crate::protocol::{Event, Kind, Timestamp, VerifiedEvent};

/// Lines verified together.
const BATCH: usize = 4096;
/// Stores in flight: enough for the writer's groups, well under its queue.
const IN_FLIGHT: usize = 512;
/// How often the progress line on a terminal is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// What an import did, printed as one JSON line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImportSummary {
    /// Non-empty lines read.
    pub read: u64,
    /// Newly stored.
    pub stored: u64,
    /// Already stored (or twice in the input).
    pub duplicate: u64,
    /// A newer version of the same replaceable / addressable event is stored.
    pub superseded: u64,
    /// Deleted by its author (NIP-09) before it arrived.
    pub deleted: u64,
    /// Its NIP-40 expiration has passed.
    pub expired: u64,
    /// Not an event, a bad id or signature, a kind that is never stored, or refused by
    /// moderation.
    pub invalid: u64,
    /// The blobs of `--media`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<super::media::MediaImported>,
}

/// One input line after parsing and verification.
type Checked = (u64, Result<VerifiedEvent, String>);

/// Imports the JSON lines of `input` into the configured data directory; bad lines are
/// reported on stderr.
/// With `media`, the blobs of that folder too ([`super::media::import`]), after the events.
pub async fn import(
    config: Config,
    input: Box<dyn BufRead + Send>,
    media: Option<&std::path::Path>,
) -> Result<ImportSummary, OfflineError> {
    let app = open(config, true)?;
    let mut summary = import_into(app.clone(), input).await;
    if let (Ok(summary), Some(dir)) = (&mut summary, media) {
        match super::media::import(&app, dir).await {
            Ok(done) => summary.media = Some(done),
            Err(e) => {
                AppState::close(app).await?;
                return Err(e);
            }
        }
    }
    AppState::close(app).await?;
    summary
}

/// [`import`] into an open relay state, which goes on serving (or is shut down by the caller):
/// every event counted as stored was durably written.
pub(crate) async fn import_into(
    app: Arc<AppState>,
    input: Box<dyn BufRead + Send>,
) -> Result<ImportSummary, OfflineError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Checked>>(2);
    let reader = std::thread::Builder::new().name("hearth-import".into()).spawn(move || read_and_verify(input, tx))?;
    let mut summary = ImportSummary::default();
    let progress = std::io::stderr().is_terminal();
    let mut drawn = Instant::now();
    let now = Timestamp::now();
    while let Some(batch) = rx.recv().await {
        let mut valid = Vec::with_capacity(batch.len());
        for (line, checked) in batch {
            summary.read += 1;
            match checked {
                Ok(event) => valid.push((line, event)),
                Err(reason) => {
                    summary.invalid += 1;
                    eprintln!("line {line}: {reason}");
                }
            }
        }
        let app = &app;
        // In input order: each store is queued to the writer when first polled, in order.
        let settled = futures_util::stream::iter(valid)
            .map(|(line, e)| async move { (line, settle(app, e, now, None).await) })
            .buffered(IN_FLIGHT);
        let mut settled = std::pin::pin!(settled);
        while let Some((line, outcome)) = settled.next().await {
            match outcome {
                Settled::Stored => summary.stored += 1,
                Settled::Duplicate => summary.duplicate += 1,
                Settled::Superseded => summary.superseded += 1,
                Settled::Deleted => summary.deleted += 1,
                Settled::Expired => summary.expired += 1,
                // Ephemeral kinds are refused before `settle`.
                Settled::Live => {}
                Settled::Refused(refusal) => {
                    summary.invalid += 1;
                    eprintln!("line {line}: {refusal}");
                }
            }
            if progress && drawn.elapsed() >= PROGRESS_EVERY {
                drawn = Instant::now();
                eprint!("\r{} read, {} stored, {} invalid", summary.read, summary.stored, summary.invalid);
            }
        }
    }
    if progress {
        eprintln!("\r{} read, {} stored, {} invalid", summary.read, summary.stored, summary.invalid);
    }
    reader.join().unwrap_or_else(|_| Err(std::io::Error::other("the import's reader panicked")))?;
    Ok(summary)
}

/// Reads `input` in batches, verifies each batch on every core, and sends it on in order.
fn read_and_verify(input: Box<dyn BufRead + Send>, tx: tokio::sync::mpsc::Sender<Vec<Checked>>) -> std::io::Result<()> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut lines = input.lines();
    let mut number = 0u64;
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        for line in lines.by_ref() {
            number += 1;
            let line = line?;
            if !line.trim().is_empty() {
                batch.push((number, line));
            }
            if batch.len() == BATCH {
                break;
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        let chunk = batch.len().div_ceil(cores);
        let checked: Vec<Checked> = std::thread::scope(|scope| {
            let workers: Vec<_> = batch
                .chunks(chunk)
                .map(|part| (part, scope.spawn(move || part.iter().map(|(n, l)| (*n, check(l))).collect::<Vec<_>>())))
                .collect();
            workers
                .into_iter()
                .flat_map(|(part, worker)| {
                    worker.join().unwrap_or_else(|_| {
                        part.iter().map(|(n, _)| (*n, Err("error: checking this line failed".to_string()))).collect()
                    })
                })
                .collect()
        });
        if tx.blocking_send(checked).is_err() {
            return Ok(());
        }
    }
}

/// One line as a verified event that may be stored, or why not.
fn check(line: &str) -> Result<VerifiedEvent, String> {
    let event = Event::from_json(line).map_err(|e| format!("invalid: {e}"))?;
    if event.kind == Kind::AUTH || event.kind.is_ephemeral() {
        return Err(format!("invalid: kind {} is never stored", event.kind.0));
    }
    verify(event).map_err(|e| format!("invalid: {e}"))
}

impl crate::relay::Relay {
    /// Stores JSON lines of signed events before the relay serves, by the publish rules without
    /// quotas (what `hearth import` does); bad lines are reported on stderr and counted.
    pub async fn import(&self, input: Box<dyn std::io::BufRead + Send>) -> Result<ImportSummary, OfflineError> {
        import_into(self.app.clone(), input).await
    }
}
