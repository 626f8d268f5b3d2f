//! The PostgreSQL backend's reads: queries, counts, single events, NIP-77 items, exports.
//!
//! Owns scanning a filter page by page, newest first ([`scan`]), and checking every row as the
//! embedded backend checks a candidate: its id, author and kind decoded, and the viewer's read
//! rules (private kinds, withheld groups, held events)
//! — so a row the viewer may not read is neither served nor counted toward a `limit`. A count
//! whose filters can match nothing a viewer is refused is one `count(*)`; any other is counted
//! from the rows it would serve.

use std::collections::{BTreeMap, HashSet};

use tokio_postgres::GenericClient;
use tokio_postgres::Row;

use super::error::PgError;
use super::sql::{self, After, Sql};
use super::write::event_id;
use crate::protocol::{Event, EventId, EventJson, Filter, Kind, PubKey, Timestamp, Viewer};

/// A row a scan kept.
pub(super) struct Hit {
    pub(super) seq: i64,
    pub(super) id: EventId,
    pub(super) created_at: Timestamp,
    pub(super) json: String,
}

/// Rows fetched at once.
const PAGE: usize = 500;

/// The newest `want` rows of `filter` at `now` that `viewer` may read, newest first (ties lowest
/// id first); stops early once more than `cap` are kept.
pub(super) async fn scan<C: GenericClient>(
    client: &C,
    filter: &Filter,
    now: Timestamp,
    viewer: &Viewer,
    want: usize,
    cap: usize,
) -> Result<Vec<Hit>, PgError> {
    let mut hits: Vec<Hit> = Vec::new();
    if want == 0 || filter.is_empty_set() {
        return Ok(hits);
    }
    let mut seen = HashSet::new();
    let mut after: Option<After> = None;
    loop {
        let size = want.saturating_sub(hits.len()).clamp(16, PAGE);
        let sql = sql::page(filter, now, after, i64::try_from(size).unwrap_or(i64::MAX));
        let rows = client.query_typed(&sql.text, &sql.typed()).await?;
        let full = rows.len() == size;
        for row in &rows {
            let Some(hit) = checked(row, filter, viewer)? else {
                if let Some(key) = key_of(row) {
                    after = Some(key);
                }
                continue;
            };
            after = Some((hit.created_at, hit.id));
            if seen.insert(hit.id) {
                hits.push(hit);
            }
            if hits.len() >= want || hits.len() > cap {
                return Ok(hits);
            }
        }
        if !full {
            return Ok(hits);
        }
    }
}

/// The sort key of a row of [`sql::COLUMNS`].
fn key_of(row: &Row) -> Option<After> {
    let id = event_id(&row.try_get::<_, Vec<u8>>(1).ok()?)?;
    Some((Timestamp(u64::try_from(row.try_get::<_, i64>(4).ok()?).unwrap_or(0)), id))
}

/// The row as a hit, when it matches the whole filter and `viewer` may read it; a row that does
/// not decode is logged and left out, as a damaged record is.
fn checked(row: &Row, filter: &Filter, viewer: &Viewer) -> Result<Option<Hit>, PgError> {
    let seq: i64 = row.try_get(0)?;
    let (Some((created_at, id)), Some(pubkey)) = (key_of(row), row.try_get::<_, Vec<u8>>(2).ok().and_then(pubkey))
    else {
        return Ok(None);
    };
    let kind = Kind(u16::try_from(row.try_get::<_, i32>(3)?).unwrap_or(0));
    if viewer.refuses_outright(kind) || viewer.withholds(&id, &pubkey) {
        return Ok(None);
    }
    let json: String = row.try_get(5)?;
    // The statement applied the filter's tag conditions exactly (`sql::page`): the JSON is read
    // only when the viewer's rules need the tags.
    if viewer.needs_tags(kind, &pubkey) {
        let event = match Event::from_json(&json) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(id = %id.to_hex(), error = %e, "a stored event that does not decode is left out");
                return Ok(None);
            }
        };
        if !filter.matches_tags(&event.tags) || !viewer.may_read(kind, &pubkey, &event.tags) {
            return Ok(None);
        }
    }
    Ok(Some(Hit { seq, id, created_at, json }))
}

fn pubkey(bytes: Vec<u8>) -> Option<PubKey> {
    <[u8; 32]>::try_from(bytes.as_slice()).ok().map(PubKey)
}

/// A filter's `limit` as a count of rows (none: all).
pub(super) fn limit_of(filter: &Filter) -> usize {
    filter.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX))
}

/// The events matching any filter: newest first, ties lowest id first, each filter's `limit`
/// its own, no event twice.
pub(super) async fn query<C: GenericClient>(
    client: &C,
    filters: &[Filter],
    now: Timestamp,
    viewer: &Viewer,
) -> Result<Vec<EventJson>, PgError> {
    let mut all: BTreeMap<(std::cmp::Reverse<Timestamp>, EventId), String> = BTreeMap::new();
    for filter in filters {
        for hit in scan(client, filter, now, viewer, limit_of(filter), usize::MAX).await? {
            all.insert((std::cmp::Reverse(hit.created_at), hit.id), hit.json);
        }
    }
    Ok(all.into_values().map(EventJson::written_by_hearth).collect())
}

/// How many events match any filter; `limit` is ignored.
pub(super) async fn count<C: GenericClient>(
    client: &C,
    filters: &[Filter],
    now: Timestamp,
    viewer: &Viewer,
) -> Result<u64, PgError> {
    let filters: Vec<&Filter> = filters.iter().filter(|f| !f.is_empty_set()).collect();
    if filters.is_empty() {
        return Ok(0);
    }
    // Rows the viewer may not read can only be among a private kind's or a withheld group's.
    if !viewer.screens() && filters.iter().all(|f| !viewer.private().can_match(f)) {
        let mut sql = Sql::default();
        let conditions: Vec<String> = filters.iter().map(|f| sql::condition(&mut sql, f, now)).collect();
        let text = format!("SELECT count(*) FROM events e WHERE {}", conditions.join(" OR "));
        let row = client.query_typed_one(&text, &sql.typed()).await?;
        return Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
    }
    let mut seen = HashSet::new();
    for filter in filters {
        let unlimited = Filter { limit: None, ..filter.clone() };
        seen.extend(scan(client, &unlimited, now, viewer, usize::MAX, usize::MAX).await?.into_iter().map(|h| h.seq));
    }
    Ok(seen.len() as u64)
}

/// One stored event by id, if not expired and `viewer` may read it.
pub(super) async fn get<C: GenericClient>(
    client: &C,
    id: &EventId,
    now: Timestamp,
    viewer: &Viewer,
) -> Result<Option<EventJson>, PgError> {
    let filter = Filter { ids: Some(vec![*id]), ..Filter::default() };
    Ok(scan(client, &filter, now, viewer, 1, 1).await?.into_iter().next().map(|h| EventJson::written_by_hearth(h.json)))
}

/// The NIP-77 items of `filter` for `viewer`, sorted by created_at then id; None when more
/// than `max` match. Its `limit` keeps the newest that many.
pub(super) async fn items<C: GenericClient>(
    client: &C,
    filter: &Filter,
    now: Timestamp,
    viewer: &Viewer,
    max: usize,
) -> Result<Option<Vec<(Timestamp, EventId)>>, PgError> {
    let hits = scan(client, filter, now, viewer, limit_of(filter), max).await?;
    if hits.len() > max {
        return Ok(None);
    }
    let mut items: Vec<(Timestamp, EventId)> = hits.into_iter().map(|h| (h.created_at, h.id)).collect();
    items.sort_unstable();
    Ok(Some(items))
}

/// Which of `ids` the database holds.
pub(super) async fn present<C: GenericClient>(client: &C, ids: &[EventId]) -> Result<HashSet<EventId>, PgError> {
    let asked: Vec<Vec<u8>> = ids.iter().map(|id| id.0.to_vec()).collect();
    let rows = client.query("SELECT id FROM events WHERE id = ANY($1)", &[&asked]).await?;
    Ok(rows.iter().filter_map(|r| event_id(&r.get::<_, Vec<u8>>(0))).collect())
}
