//! A NIP-01 filter as SQL: the conditions, their parameters, and how a scan pages.
//!
//! Owns [`Sql`] (a statement's text and its parameters as they are bound, each with its type, so
//! that a page is one round trip: parsed, bound and run together, planned with its values in
//! hand, never prepared first), the tag value as the `tags` table keys it ([`tag_key`]), and the
//! statements a filter reads with: a page of its newest matches ([`page`], driven by the
//! `tags_value` index when the filter names tag values, each of its events then fetched by `seq`,
//! else by an `events` index), and the condition alone ([`condition`], for a count). The
//! conditions are the filter exactly, tags included (a long value is keyed by its SHA-256, as it
//! was stored): the read path does not parse a row's JSON to check its tags again.

use sha2::{Digest, Sha256};
use tokio_postgres::types::{ToSql, Type};

use crate::protocol::{EventId, Filter, Timestamp};

/// Tag values longer than this (bytes) are keyed by their hash: a b-tree entry has a size limit.
pub(super) const LONG_VALUE: usize = 256;

/// A statement's text and its parameters.
#[derive(Default)]
pub(super) struct Sql {
    pub(super) text: String,
    pub(super) params: Vec<(Box<dyn ToSql + Sync + Send>, Type)>,
}

/// A value a filter binds, with the PostgreSQL type it is bound as.
pub(super) trait Bound: ToSql + Sync + Send + Clone + 'static {
    /// Its type.
    const TYPE: Type;
}

impl Bound for i64 {
    const TYPE: Type = Type::INT8;
}
impl Bound for i32 {
    const TYPE: Type = Type::INT4;
}
impl Bound for String {
    const TYPE: Type = Type::TEXT;
}
impl Bound for Vec<u8> {
    const TYPE: Type = Type::BYTEA;
}
impl Bound for Vec<i32> {
    const TYPE: Type = Type::INT4_ARRAY;
}
impl Bound for Vec<Vec<u8>> {
    const TYPE: Type = Type::BYTEA_ARRAY;
}

impl Sql {
    /// Binds a parameter; its placeholder.
    fn bind<T: Bound>(&mut self, value: T) -> String {
        self.params.push((Box::new(value), T::TYPE));
        format!("${}", self.params.len())
    }

    /// The parameters with their types (`query_typed`: one round trip).
    pub(super) fn typed(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.params.iter().map(|(p, t)| (p.as_ref() as &(dyn ToSql + Sync), t.clone())).collect()
    }
}

/// How the `tags` table keys a value: its bytes, or, over [`LONG_VALUE`], 0xff and its SHA-256
/// (0xff never starts UTF-8, so a hash cannot equal a short value).
pub(super) fn tag_key(value: &str) -> Vec<u8> {
    if value.len() <= LONG_VALUE {
        return value.as_bytes().to_vec();
    }
    let mut key = vec![0xff];
    key.extend_from_slice(&Sha256::digest(value.as_bytes()));
    key
}

/// Where a page resumes: after this event in the order newest first, lowest id first.
pub(super) type After = (Timestamp, EventId);

/// The columns a scan reads (the JSON last: every row is checked against the whole filter).
pub(super) const COLUMNS: &str = "e.seq, e.id, e.pubkey, e.kind, e.created_at, e.json";

/// The conditions on `e` of `filter` at `now`, but the tag condition named `skip` (which a page
/// driven by `tags` applies itself), joined with AND.
fn conditions(sql: &mut Sql, filter: &Filter, now: Timestamp, skip: Option<char>) -> String {
    let mut parts = Vec::new();
    if let Some(ids) = &filter.ids {
        parts.push(one_of(sql, "e.id", ids.iter().map(|id| id.0.to_vec()).collect()));
    }
    if let Some(authors) = &filter.authors {
        parts.push(one_of(sql, "e.pubkey", authors.iter().map(|a| a.0.to_vec()).collect()));
    }
    if let Some(kinds) = &filter.kinds {
        parts.push(one_of(sql, "e.kind", kinds.iter().map(|k| i32::from(k.0)).collect()));
    }
    if let Some(since) = filter.since {
        parts.push(format!("e.created_at >= {}", sql.bind(seconds(since))));
    }
    if let Some(until) = filter.until {
        parts.push(format!("e.created_at <= {}", sql.bind(seconds(until))));
    }
    parts.push(format!("(e.expiration IS NULL OR e.expiration > {})", sql.bind(seconds(now))));
    for (letter, values) in &filter.tags {
        if Some(*letter) == skip {
            continue;
        }
        let (name, keys) =
            (sql.bind(letter.to_string()), sql.bind(values.iter().map(|v| tag_key(v)).collect::<Vec<_>>()));
        parts.push(format!(
            "EXISTS (SELECT 1 FROM tags x WHERE x.seq = e.seq AND x.name = {name} AND x.value = ANY({keys}))"
        ));
    }
    parts.join(" AND ")
}

/// `column` equal to one of `values`: one value bound alone (the planner then reads one range
/// of an index, in its order: `= ANY` of an array it cannot see makes it sort), several as an
/// array.
fn one_of<T: Bound>(sql: &mut Sql, column: &str, values: Vec<T>) -> String
where
    Vec<T>: Bound,
{
    match values.as_slice() {
        [one] => format!("{column} = {}", sql.bind(one.clone())),
        _ => format!("{column} = ANY({})", sql.bind(values)),
    }
}

/// The condition of `filter` at `now` alone (a count's `WHERE`), its parameters bound to `sql`.
pub(super) fn condition(sql: &mut Sql, filter: &Filter, now: Timestamp) -> String {
    format!("({})", conditions(sql, filter, now, None))
}

/// A page of `filter`'s newest matches at `now`: at most `size` rows of [`COLUMNS`], after
/// `after`. A filter that names tag values (and no ids) is read from
/// `tags_value`, its tag with the fewest values driving the scan.
pub(super) fn page(filter: &Filter, now: Timestamp, after: Option<After>, size: i64) -> Sql {
    let mut sql = Sql::default();
    let driver = match &filter.ids {
        Some(_) => None,
        None => filter.tags.iter().min_by_key(|(_, values)| values.len()).map(|(letter, values)| (*letter, values)),
    };
    let (from, order_by) = match driver {
        Some((letter, values)) => {
            let name = sql.bind(letter.to_string());
            let value = one_of(&mut sql, "t.value", values.iter().map(|v| tag_key(v)).collect());
            // Each tag row's event fetched by the `seq` `tags_value` carries (the tag side an
            // index-only scan where vacuum has marked the pages visible; by the primary key a page
            // of 100 costs the server a fifth less than by the id), and by nothing else:
            // `OFFSET 0` keeps the planner from folding the lookup into the join, where, for a
            // kind the statistics have not seen yet (a new room's messages), it walked that
            // kind's whole index for every tag row (1,237 rows a probe, 56 ms a room at 1M).
            (
                format!(
                    "tags t CROSS JOIN LATERAL (SELECT * FROM events x WHERE x.seq = t.seq OFFSET 0) e \
                     WHERE t.name = {name} AND {value} AND"
                ),
                "t",
            )
        }
        None => ("events e WHERE".to_string(), "e"),
    };
    let conds = conditions(&mut sql, filter, now, driver.map(|(letter, _)| letter));
    let resume = match after {
        Some((at, id)) => {
            let (at, id) = (sql.bind(seconds(at)), sql.bind(id.0.to_vec()));
            // The bound alone first: the index scan starts there (inside the OR it is only a
            // filter: a window's page resumed deep in a 300k store walked the 190,732 newer rows,
            // 250 ms).
            format!(
                " AND {order_by}.created_at <= {at} \
                 AND ({order_by}.created_at < {at} OR ({order_by}.created_at = {at} AND {order_by}.id > {id}))"
            )
        }
        None => String::new(),
    };
    let limit = sql.bind(size);
    sql.text = format!(
        "SELECT {COLUMNS} FROM {from} {conds}{resume} ORDER BY {order_by}.created_at DESC, {order_by}.id LIMIT {limit}"
    );
    sql
}

/// A timestamp as the BIGINT columns hold it.
pub(super) fn seconds(at: Timestamp) -> i64 {
    i64::try_from(at.0).unwrap_or(i64::MAX)
}

/// The address key of a replaceable or addressable event: SHA-256 of author, kind and `d`.
pub(super) fn address_key(pubkey: &crate::protocol::PubKey, kind: crate::protocol::Kind, d: &str) -> Vec<u8> {
    let mut hash = Sha256::new();
    hash.update(pubkey.0);
    hash.update(kind.0.to_be_bytes());
    hash.update(d.as_bytes());
    hash.finalize().to_vec()
}

/// An advisory lock key of 8 bytes of a hash (an event id, an address key).
pub(super) fn lock_key(hash: &[u8]) -> i64 {
    let mut bytes = [0u8; 8];
    for (b, h) in bytes.iter_mut().zip(hash) {
        *b = *h;
    }
    i64::from_be_bytes(bytes)
}
