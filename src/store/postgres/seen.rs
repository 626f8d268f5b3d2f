//! Whether events are stored, asked together: the duplicate check every publish makes before it
//! is billed (`ingest`), one query for every id that waits, not one round trip each.
//!
//! Owns the node's lookup task ([`looker`]) and what a question hands it ([`Ask`]). The task
//! takes every id asked since its last query (up to [`MAX_ASKED`]) and answers each from one
//! query of them all (the ids unnested, joined to the events' id index). An id stored by a
//! commit after the query started is answered "not stored", as a lone query started at the same
//! moment would be: the put that follows is then answered as a duplicate by the put itself (the
//! id's unique index), and the event is stored once.

use std::collections::HashSet;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::Type;

use super::error::PgError;
use crate::protocol::EventId;
use crate::store::error::StoreError;

/// The most ids one query asks about.
pub(super) const MAX_ASKED: usize = 1024;

/// One id asked about, and where it is answered.
pub(super) struct Ask {
    pub(super) id: EventId,
    pub(super) answer: oneshot::Sender<Result<bool, StoreError>>,
}

/// The node's looker: asks together until every sender is gone (the store dropped).
pub(super) async fn looker(pool: Pool, mut asks: mpsc::Receiver<Ask>) {
    let mut waiting = Vec::with_capacity(MAX_ASKED);
    while asks.recv_many(&mut waiting, MAX_ASKED).await > 0 {
        let ids: Vec<Vec<u8>> = waiting.iter().map(|ask| ask.id.0.to_vec()).collect();
        match stored_among(&pool, &ids).await {
            Ok(stored) => {
                for ask in waiting.drain(..) {
                    let _ = ask.answer.send(Ok(stored.contains(&ask.id.0[..])));
                }
            }
            Err(e) => {
                // Each asker is told what a lone query would have told it.
                let text = e.to_string();
                let away = matches!(StoreError::from(e), StoreError::Unavailable(_));
                for ask in waiting.drain(..) {
                    let e =
                        if away { StoreError::Unavailable(text.clone()) } else { StoreError::Postgres(text.clone()) };
                    let _ = ask.answer.send(Err(e));
                }
            }
        }
    }
}

/// Which of `ids` are stored. Planned afresh for each question, with its ids in hand (the
/// unnamed statement): a plan cached while the table was small would scan it whole long after
/// it has grown.
async fn stored_among(pool: &Pool, ids: &[Vec<u8>]) -> Result<HashSet<Vec<u8>>, PgError> {
    let client = pool.get().await?;
    let select = "SELECT e.id FROM unnest($1::bytea[]) AS x(id) JOIN events e ON e.id = x.id";
    let rows = client.query_typed(select, &[(&ids, Type::BYTEA_ARRAY)]).await?;
    Ok(rows.iter().filter_map(|row| row.try_get::<_, Vec<u8>>(0).ok()).collect())
}
