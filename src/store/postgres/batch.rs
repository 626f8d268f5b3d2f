//! Group commit on PostgreSQL: the puts that wait together go in one transaction, one commit.
//!
//! Owns the node's one writer task ([`writer`]) and what a put hands it ([`Job`]). The task takes
//! every put queued since its last commit (up to [`MAX_BATCH`]), opens a transaction, sends the
//! puts in the order they arrived — each run of plain events (regular kinds, no deletion) as one
//! `hearth_put_plain`, every other put as its own `hearth_put` — pipelined on one connection (one
//! round trip for all of them, executed by the server in that order), and commits once. Only
//! then is each put answered, with its own outcome: an `OK true` still means the commit that
//! holds the event is on the server's disk (`synchronous_commit = on`). The advisory locks both
//! functions take are the transaction's, so they are held to the batch's commit and two nodes
//! still serialise the writes of one address or an event and its deletion.
//!
//! When any statement of a batch fails (a deadlock lost to another node, a connection cut), the
//! transaction is rolled back, nothing of it is stored, and each put is run again alone, in
//! order, in its own transaction ([`super::write::put`], which retries a lost deadlock): each is
//! answered truthfully, one failing put never fails the others. So is a batch whose commit
//! failed or whose answer was lost: a put that commit did store is then a duplicate (accepted,
//! stored once), one it did not is stored now or refused with its own error.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::error::PgError;
use super::write::{self, PUT, PUT_PLAIN, PlainArgs, Put, PutArgs};
use crate::protocol::{EventId, VerifiedEvent};
use crate::search::Change;

/// The most puts one transaction holds.
pub(super) const MAX_BATCH: usize = 512;

/// Transactions the writers of this process committed with more than one put (tests).
#[cfg(test)]
pub(super) static BATCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What one put hands the writer, and where it is answered.
pub(super) struct Job {
    pub(super) event: std::sync::Arc<VerifiedEvent>,
    pub(super) answer: oneshot::Sender<Result<(Put, Vec<Change>), PgError>>,
}

/// The node's writer: batches until every sender is gone (the store dropped).
pub(super) async fn writer(pool: Pool, mut jobs: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let taken = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
        run(&pool, taken).await;
    }
}

/// One batch: together in one transaction, else each alone.
async fn run(pool: &Pool, batch: Vec<Job>) {
    if batch.len() > 1 {
        match together(pool, &batch).await {
            Ok(outcomes) => {
                for (job, outcome) in batch.into_iter().zip(outcomes) {
                    // A put whose caller went away is stored all the same.
                    let _ = job.answer.send(Ok(outcome));
                }
                return;
            }
            Err(e) => tracing::debug!(error = %e, puts = batch.len(), "a batch failed; its puts run alone"),
        }
    }
    for job in batch {
        let outcome = match pool.get().await {
            Ok(mut client) => write::put(&mut client, &job.event).await,
            Err(e) => Err(PgError::from(e)),
        };
        let _ = job.answer.send(outcome);
    }
}

/// How a batch is sent: runs of plain events (`write::is_plain`) each as one statement, every
/// other put as its own, in the order they arrived.
enum Segment {
    /// The positions in the batch of a run's events, and their arguments.
    Plain(Vec<usize>, PlainArgs),
    /// The position of one put, and its arguments.
    One(usize, PutArgs),
}

/// A batch as sent: its segments, and each repeat's position beside its first's.
type Plan = (Vec<Segment>, Vec<(usize, usize)>);

/// The batch's segments; a put that repeats an id earlier in its run is not sent, and its
/// position is in the second list beside the first's (it is answered as that one was: stored
/// makes it a duplicate).
fn segments(batch: &[Job]) -> Result<Plan, PgError> {
    let (mut segments, mut repeats) = (Vec::new(), Vec::new());
    let mut run: HashMap<EventId, usize> = HashMap::new();
    for (i, job) in batch.iter().enumerate() {
        let args = PutArgs::of(&job.event)?;
        if !write::is_plain(&job.event) {
            segments.push(Segment::One(i, args));
            continue;
        }
        if !matches!(segments.last(), Some(Segment::Plain(..))) {
            segments.push(Segment::Plain(Vec::new(), PlainArgs::default()));
            run.clear();
        }
        if let Some(&first) = run.get(&job.event.id) {
            repeats.push((i, first));
        } else if let Some(Segment::Plain(members, plain)) = segments.last_mut() {
            run.insert(job.event.id, i);
            members.push(i);
            plain.push(args);
        }
    }
    Ok((segments, repeats))
}

/// Every put of `batch` in one transaction and one commit, all of it pipelined: `BEGIN`, each
/// segment's statement and `COMMIT` are sent at once, in order, and answered in one round trip
/// (a node far from its database pays its latency once per batch, as a lone put does). The
/// outcomes in order; `Err` when anything failed, after the transaction is rolled back
/// (nothing of it is stored) or its connection dropped.
async fn together(pool: &Pool, batch: &[Job]) -> Result<Vec<(Put, Vec<Change>)>, PgError> {
    let (mut segments, repeats) = segments(batch)?;
    let client = pool.get().await?;
    let (one, plain) = (client.prepare_cached(PUT).await?, client.prepare_cached(PUT_PLAIN).await?);
    type Step<'a> =
        Pin<Box<dyn Future<Output = Result<Option<tokio_postgres::Row>, tokio_postgres::Error>> + Send + 'a>>;
    let mut steps: Vec<Step<'_>> = Vec::with_capacity(segments.len() + 2);
    let connection = &client;
    steps.push(Box::pin(async { client.batch_execute("BEGIN").await.map(|()| None) }));
    for segment in segments.iter_mut() {
        let (statement, params): (_, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>) = match segment {
            Segment::Plain(_, args) => (&plain, args.params().to_vec()),
            Segment::One(_, args) => (&one, args.params().to_vec()),
        };
        steps.push(Box::pin(async move { connection.query_one(statement, &params).await.map(Some) }));
    }
    steps.push(Box::pin(async { client.batch_execute("COMMIT").await.map(|()| None) }));
    let mut answers = in_order(steps).await.into_iter();
    let begun = answers.next().unwrap_or(Ok(None)).map_err(PgError::from);
    let rows: Vec<_> = answers.by_ref().take(segments.len()).collect();
    let committed = answers.next().unwrap_or(Ok(None)).map_err(PgError::from);
    let mut outcomes: Vec<Option<(Put, Vec<Change>)>> = batch.iter().map(|_| None).collect();
    let mut failed = begun.err();
    for (row, segment) in rows.into_iter().zip(&segments) {
        let answered = row.map_err(PgError::from).and_then(|row| row.ok_or(PgError::Encode("no row".into())));
        if let Err(e) = answered.and_then(|row| settle(&row, segment, batch, &mut outcomes)) {
            failed = failed.or(Some(e));
        }
    }
    // A statement that failed aborted the transaction, and its COMMIT rolled it back: nothing of
    // the batch is stored.
    if let Some(e) = failed.or(committed.err()) {
        // The connection goes back to the pool outside any transaction, or not at all.
        if client.batch_execute("ROLLBACK").await.is_err() {
            drop(deadpool_postgres::Object::take(client));
        }
        return Err(e);
    }
    for (repeat, first) in repeats {
        outcomes[repeat] = outcomes[first].as_ref().map(|(put, _)| match put {
            Put::Stored | Put::Duplicate => (Put::Duplicate, Vec::new()),
            Put::Superseded => (Put::Superseded, Vec::new()),
            Put::Deleted => (Put::Deleted, Vec::new()),
        });
    }
    #[cfg(test)]
    BATCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    outcomes.into_iter().map(|o| o.ok_or(PgError::Encode("a put of the batch was not answered".into()))).collect()
}

/// Puts the answers of one segment's row in their places.
fn settle(
    row: &tokio_postgres::Row,
    segment: &Segment,
    batch: &[Job],
    outcomes: &mut [Option<(Put, Vec<Change>)>],
) -> Result<(), PgError> {
    match segment {
        Segment::One(i, _) => outcomes[*i] = Some(write::outcome(row, &batch[*i].event)?),
        Segment::Plain(members, args) => {
            let answers: Vec<String> = row.try_get(0)?;
            if answers.len() != args.len() {
                return Err(PgError::Encode(format!("{} answers for {} events", answers.len(), args.len())));
            }
            for (i, answer) in members.iter().zip(&answers) {
                outcomes[*i] = Some(write::plain_outcome(answer, &batch[*i].event)?);
            }
        }
    }
    Ok(())
}

/// Runs `futures` to their ends together, polling them in their order every time: the first
/// poll of each, where tokio-postgres sends its statement, comes in that order, so the server
/// runs them in the order the puts arrived (`join_all` does not promise an order past a few
/// dozen futures).
pub(super) async fn in_order<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(done) => *output = Some(done),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting { Poll::Pending } else { Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
