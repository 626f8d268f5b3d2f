//! The one read path for every transport: prepare filters → handler permit → store query or
//! count → the typed outcome each transport maps to its wire.
//!
//! Owns applying the NIP-11 request limits (subscription id length, filter count, `limit`
//! defaulted and clamped to `max_limit`), holding a handler permit while the store is read, and
//! the errors a read can end in ([`QueryError`]). It does not bill the frame's arrival
//! (`ws_events` / `api_calls` are the transport's, before it gets here) and does not know
//! subscriptions: a WebSocket REQ registers its live subscription through the `on_permit` hook,
//! so that no event stored during the scan is missed.

use crate::app::AppState;
use crate::config::Limitation;
use crate::limiter::{Billed, RateLimited};
use crate::protocol::{EventJson, Filter, Kind, PubKey, Timestamp, Viewer};
use crate::store::{Mark, StoreError};

/// Why a read was not answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The request breaks a NIP-11 limit; the text names which.
    #[error("{0}")]
    Limits(String),
    /// A filter is not one the relay can answer (a `search` too long or with nothing to look
    /// for); the text says why (`CLOSED "invalid: …"`, 400).
    #[error("{0}")]
    Invalid(String),
    /// The relay does not do what a filter asks (`search` with `storage.search` off).
    #[error("{0}")]
    Unsupported(String),
    /// The relay cannot answer it now (the search index is being rebuilt, or failed).
    #[error("{0}")]
    Unavailable(String),
    /// No handler permit within `limits.handler_wait_ms`.
    #[error(transparent)]
    RateLimited(#[from] RateLimited),
    /// The store failed (logged here, once).
    #[error("the store failed")]
    Store(StoreError),
}

/// What a NIP-50 `search` filter must keep to (`limits.max_search_chars`), and the kinds the
/// index holds (`storage.search_kinds`).
#[derive(Clone, Copy, Debug)]
pub struct SearchRules<'a> {
    /// The longest search text, in characters.
    pub max_chars: usize,
    /// The kinds a search can find.
    pub kinds: &'a [Kind],
}

impl SearchRules<'_> {
    /// The rules of `config`.
    pub fn of(config: &crate::config::Config) -> SearchRules<'_> {
        SearchRules { max_chars: config.limits.max_search_chars, kinds: &config.storage.search_kinds }
    }
}

/// Checks a REQ/COUNT (`sub_id`: its id, `""` over REST) against the limits (a NIP-50 `search`
/// within `search`'s rules, with something to look for) and applies `default_limit` / clamps to
/// `max_limit`. A searching filter's `kinds` become those of them the index holds (all it holds
/// when it names none): what a search finds, stored or live, is of those kinds only.
pub fn prepare(lim: &Limitation, search: SearchRules, sub_id: &str, filters: &mut [Filter]) -> Result<(), QueryError> {
    let chars = sub_id.chars().count();
    if chars > lim.max_subid_length {
        return Err(QueryError::Limits(format!(
            "subscription id is {chars} characters, the limit is {}",
            lim.max_subid_length
        )));
    }
    if filters.len() > lim.max_filters {
        return Err(QueryError::Limits(format!("{} filters, the limit is {}", filters.len(), lim.max_filters)));
    }
    for f in filters.iter_mut() {
        if let Some(text) = &f.search {
            crate::protocol::search::parse(text, search.max_chars).map_err(|e| QueryError::Invalid(e.to_string()))?;
            let kinds = match &f.kinds {
                Some(asked) => asked.iter().copied().filter(|k| search.kinds.contains(k)).collect(),
                None => search.kinds.to_vec(),
            };
            f.kinds = Some(kinds);
        }
        f.limit = Some(f.limit.unwrap_or(lim.default_limit).min(lim.max_limit));
    }
    Ok(())
}

fn store_failed(e: StoreError) -> QueryError {
    match e {
        StoreError::SearchOff => QueryError::Unsupported(e.to_string()),
        StoreError::SearchBuilding { .. } | StoreError::Search(_) | StoreError::Unavailable(_) => {
            QueryError::Unavailable(e.to_string())
        }
        e => {
            tracing::error!(error = %e, "query failed");
            QueryError::Store(e)
        }
    }
}

/// The stored events matching prepared `filters` that `viewer` may read, newest first, and the mark of what the store
/// showed the query (see [`Mark`]). `on_permit` runs once the permit is held, before the store
/// is read.
pub async fn events(
    app: &AppState,
    billed: &Billed,
    filters: Vec<Filter>,
    viewer: Viewer,
    on_permit: impl FnOnce(&[Filter]),
) -> Result<(Vec<EventJson>, Mark), QueryError> {
    let _permit = app.limiter.acquire_handler(billed).await?;
    on_permit(&filters);
    app.store.query_async(filters, Timestamp::now(), viewer).await.map_err(store_failed)
}

/// How many stored events match prepared `filters` (NIP-45) that `viewer` may read.
pub async fn count(app: &AppState, billed: &Billed, filters: Vec<Filter>, viewer: Viewer) -> Result<u64, QueryError> {
    let _permit = app.limiter.acquire_handler(billed).await?;
    app.store.count_async(filters, Timestamp::now(), viewer).await.map_err(store_failed)
}

/// True when a request from a reader who has not authenticated can be answered with nothing:
/// every filter names private kinds only, or private groups only (NIP-42: it is refused
/// `auth-required:`, so the client authenticates and sends it again).
pub fn needs_auth_to_read(app: &AppState, reader: Option<PubKey>, filters: &[Filter]) -> bool {
    reader.is_none()
        && !filters.is_empty()
        && filters.iter().all(|f| app.private.only(f) || app.groups.only_unreadable(f, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: SearchRules = SearchRules { max_chars: 256, kinds: &[Kind(1), Kind(30023)] };

    #[test]
    fn limits_are_defaulted_and_clamped() {
        let lim = Limitation { default_limit: 10, max_limit: 20, ..Limitation::default() };
        let mut filters: Vec<Filter> = vec![
            serde_json::from_str("{}").unwrap(),
            serde_json::from_str(r#"{"limit":500}"#).unwrap(),
            serde_json::from_str(r#"{"limit":0}"#).unwrap(),
        ];
        prepare(&lim, RULES, "s", &mut filters).unwrap();
        let limits: Vec<_> = filters.iter().map(|f| f.limit).collect();
        assert_eq!(limits, vec![Some(10), Some(20), Some(0)]);
    }

    #[test]
    fn a_long_id_or_too_many_filters_name_the_limit() {
        let lim = Limitation { max_filters: 1, ..Limitation::default() };
        let err = prepare(&lim, RULES, &"x".repeat(65), &mut []).unwrap_err().to_string();
        assert_eq!(err, "subscription id is 65 characters, the limit is 64");
        let mut two: Vec<Filter> = vec![serde_json::from_str("{}").unwrap(), serde_json::from_str("{}").unwrap()];
        assert_eq!(prepare(&lim, RULES, "s", &mut two).unwrap_err().to_string(), "2 filters, the limit is 1");
    }

    #[test]
    fn a_search_too_long_or_with_nothing_to_find_is_invalid() {
        let lim = Limitation::default();
        let mut long: Vec<Filter> = vec![serde_json::from_str(r#"{"search":"aaaaa bbbbb"}"#).unwrap()];
        let err = prepare(&lim, SearchRules { max_chars: 10, ..RULES }, "s", &mut long).unwrap_err();
        assert!(matches!(&err, QueryError::Invalid(r) if r == "search is longer than 10 characters"), "{err:?}");
        assert!(prepare(&lim, SearchRules { max_chars: 11, ..RULES }, "s", &mut long).is_ok());
        let mut empty: Vec<Filter> = vec![serde_json::from_str(r#"{"search":"  -x "}"#).unwrap()];
        let err = prepare(&lim, SearchRules { max_chars: 10, ..RULES }, "s", &mut empty).unwrap_err();
        assert!(matches!(&err, QueryError::Invalid(r) if r == "search has no word to look for"), "{err:?}");
    }

    #[test]
    fn a_search_asks_only_for_the_kinds_the_index_holds() {
        let lim = Limitation::default();
        let mut filters: Vec<Filter> = vec![
            serde_json::from_str(r#"{"search":"a"}"#).unwrap(),
            serde_json::from_str(r#"{"search":"a","kinds":[7,30023]}"#).unwrap(),
            serde_json::from_str(r#"{"kinds":[7]}"#).unwrap(),
        ];
        prepare(&lim, RULES, "s", &mut filters).unwrap();
        let kinds: Vec<_> = filters.iter().map(|f| f.kinds.clone()).collect();
        assert_eq!(kinds, [Some(vec![Kind(1), Kind(30023)]), Some(vec![Kind(30023)]), Some(vec![Kind(7)])]);
    }
}
