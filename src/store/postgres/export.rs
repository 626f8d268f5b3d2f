//! The PostgreSQL backend's waiting from any thread, and its exports.
//!
//! Owns [`block`] (a future run on the backend's runtime, waited for on this thread; with a pooled
//! connection, [`block_on_pool`]) and an
//! export's snapshot and pages: the rows an export takes are fixed in a repeatable-read
//! transaction, then their JSON is fetched in pages in that same transaction, which ends when the
//! export is dropped.

use std::future::Future;

use deadpool_postgres::Object;
use tokio::runtime::Handle;

use super::error::PgError;
use super::read;
use crate::protocol::{EventJson, Filter, Timestamp, Viewer};
use crate::store::contract::{Export, ExportPages};
use crate::store::error::StoreError;

/// Runs `future` on `handle`'s runtime and waits for it on this thread (which may be an async
/// worker of another runtime: the wait blocks it as a sled read would, never the backend's).
pub(super) fn block<T: Send + 'static>(
    handle: &Handle,
    future: impl Future<Output = T> + Send + 'static,
) -> Result<T, PgError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().map_err(|_| PgError::Stopped)
}

/// Runs `work` with a connection of `pool` on `handle`'s runtime, and waits for it on this
/// thread: the backend's blocking forms, and the shared media records'.
pub(super) fn block_on_pool<T: Send + 'static, E, F>(
    handle: &Handle,
    pool: &deadpool_postgres::Pool,
    work: impl FnOnce(Object) -> F + Send + 'static,
) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, E>> + Send,
    E: From<PgError> + Into<StoreError> + Send + 'static,
{
    let pool = pool.clone();
    let work = async move { work(pool.get().await.map_err(PgError::from)?).await };
    block(handle, work)?.map_err(Into::into)
}

/// Opens the snapshot of an export of `filter` at `now` on `client`: the rows it takes, oldest
/// first (ties in the order stored).
pub(super) async fn snapshot(
    c: Object,
    filter: &Filter,
    now: Timestamp,
) -> Result<(Object, Vec<(Timestamp, i64)>), PgError> {
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?;
    let everything = Viewer::everything();
    let hits = read::scan(&**c, filter, now, &everything, read::limit_of(filter), usize::MAX);
    let mut refs: Vec<(Timestamp, i64)> = match hits.await {
        Ok(hits) => hits.into_iter().map(|h| (h.created_at, h.seq)).collect(),
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    };
    refs.sort_unstable();
    Ok((c, refs))
}

/// The export of a snapshot's rows.
pub(super) fn pages(handle: Handle, client: Object, refs: Vec<(Timestamp, i64)>) -> Export {
    Export::paged(Box::new(Pages { handle, client: Some(client), refs: refs.into_iter(), page: Vec::new() }))
}

/// An export's pages: the rows' JSON fetched in order, a page at a time, in the snapshot's
/// transaction, which ends when the export is dropped.
struct Pages {
    handle: Handle,
    client: Option<Object>,
    refs: std::vec::IntoIter<(Timestamp, i64)>,
    page: Vec<String>,
}

/// Events an export page fetches at once.
const EXPORT_PAGE: usize = 512;

impl ExportPages for Pages {
    fn remaining(&self) -> usize {
        self.refs.len() + self.page.len()
    }

    fn next_event(&mut self) -> Option<Result<EventJson, StoreError>> {
        loop {
            if let Some(json) = self.page.pop() {
                return Some(Ok(EventJson::written_by_hearth(json)));
            }
            let seqs: Vec<i64> = self.refs.by_ref().take(EXPORT_PAGE).map(|(_, seq)| seq).collect();
            if seqs.is_empty() {
                return None;
            }
            let client = self.client.take()?;
            let fetched = block(&self.handle, async move {
                let rows = client.query("SELECT seq, json FROM events WHERE seq = ANY($1)", &[&seqs]).await;
                let rows = rows.map(|rows| {
                    let mut by_seq: std::collections::HashMap<i64, String> =
                        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
                    // Newest last, so that pop gives the oldest first.
                    seqs.iter().rev().filter_map(|s| by_seq.remove(s)).collect::<Vec<String>>()
                });
                (client, rows)
            });
            match fetched {
                Ok((client, Ok(page))) => {
                    self.client = Some(client);
                    self.page = page;
                }
                Ok((_, Err(e))) => return Some(Err(StoreError::from(PgError::from(e)))),
                Err(e) => return Some(Err(e.into())),
            }
        }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // The snapshot's transaction ends before the connection goes back to the pool.
        if let Some(client) = self.client.take() {
            self.handle.spawn(async move {
                let _ = client.batch_execute("ROLLBACK").await;
            });
        }
    }
}
