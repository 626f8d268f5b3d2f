//! The PostgreSQL backend's schema: its migrations, embedded, applied in order at open.
//!
//! Owns the tables and indexes and [`migrate`]. Each migration runs in its own transaction under
//! an advisory lock, so several nodes starting at once apply it once; `hearth_schema` records
//! which have run. A database written by a newer hearth (a version above [`MIGRATIONS`]'s) is
//! refused rather than guessed at.
//!
//! The tables: `events` (one row an event: its id, author, kind, time, NIP-40 expiry, the
//! address of a replaceable or addressable event — a hash, so that a long `d` cannot break its
//! unique index — the JSON as received, and when this database stored it, for a node's catch-up
//! after it lost the live feed); `tags` (one row per distinct single-letter tag value of an
//! event, with the event's time and id beside it, so that a `#p` filter with a `limit` is one
//! range scan of `tags_value`; values over [`super::sql::LONG_VALUE`] bytes are kept as their
//! hash); `tombstones` and `address_tombstones` (NIP-09: what stays deleted); `settings`,
//! `audit`.

use tokio_postgres::Client;

use super::error::PgError;

/// The key of the advisory lock that migrations run under.
const MIGRATION_LOCK: i64 = 0x6865_6172_7468_0001;

/// Every migration, in order; the schema version is how many have run.
pub(super) const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE events (
    seq        BIGSERIAL PRIMARY KEY,
    id         BYTEA NOT NULL UNIQUE,
    pubkey     BYTEA NOT NULL,
    kind       INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    expiration BIGINT,
    address    BYTEA,
    json       TEXT NOT NULL,
    stored_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX events_time ON events (created_at DESC, id);
CREATE INDEX events_author ON events (pubkey, created_at DESC, id);
CREATE INDEX events_kind ON events (kind, created_at DESC, id);
CREATE INDEX events_author_kind ON events (pubkey, kind, created_at DESC, id);
CREATE INDEX events_expiry ON events (expiration) WHERE expiration IS NOT NULL;
CREATE INDEX events_stored ON events (stored_at);
CREATE UNIQUE INDEX events_address ON events (address) WHERE address IS NOT NULL;
CREATE TABLE tags (
    seq        BIGINT NOT NULL REFERENCES events (seq) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    value      BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    id         BYTEA NOT NULL,
    PRIMARY KEY (seq, name, value)
);
CREATE INDEX tags_value ON tags (name, value, created_at DESC, id);
CREATE TABLE tombstones (
    id      BYTEA NOT NULL,
    deleter BYTEA NOT NULL,
    PRIMARY KEY (id, deleter)
);
CREATE TABLE address_tombstones (
    address    BYTEA PRIMARY KEY,
    deleted_at BIGINT NOT NULL
);
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
CREATE TABLE audit (
    seq   BIGSERIAL PRIMARY KEY,
    entry BYTEA NOT NULL
);
"#];

/// Applies the migrations this database has not had; refuses one a newer hearth wrote.
pub(super) async fn migrate(client: &mut Client) -> Result<(), PgError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS hearth_schema (version INTEGER NOT NULL)").await?;
    let found: Option<i32> = tx.query_opt("SELECT max(version) FROM hearth_schema", &[]).await?.and_then(|r| r.get(0));
    let found = usize::try_from(found.unwrap_or(0)).unwrap_or(0);
    if found > MIGRATIONS.len() {
        return Err(PgError::Newer { found, known: MIGRATIONS.len() });
    }
    for (n, migration) in MIGRATIONS.iter().enumerate().skip(found) {
        tx.batch_execute(migration).await?;
        let version = i32::try_from(n + 1).unwrap_or(i32::MAX);
        tx.execute("INSERT INTO hearth_schema (version) VALUES ($1)", &[&version]).await?;
        tracing::info!(version, "PostgreSQL schema migrated");
    }
    tx.commit().await?;
    Ok(())
}
