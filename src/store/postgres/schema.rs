//! The PostgreSQL backend's schema: its migrations, embedded, applied in order at open.
//!
//! Owns the tables and indexes and [`migrate`]. Each migration runs in its own transaction under an
//! advisory lock, so several nodes starting at once apply it once; `hearth_schema` records which
//! have run. A database written by a newer hearth (a version above [`MIGRATIONS`]'s) is refused
//! rather than guessed at.
//!
//! The tables: `events` (one row an event: its id, author, kind, time, NIP-40 expiry, the address
//! of a replaceable or addressable event — a hash, so that a long `d` cannot break its unique index
//! — the JSON as received, and when this database stored it, for a node's catch-up after it lost
//! the live feed); `tags` (one row per distinct single-letter tag value of an event, with the
//! event's time and id beside it, so that a `#p` filter with a `limit` is one range scan of
//! `tags_value`; values over [`super::sql::LONG_VALUE`] bytes are kept as their hash); `tombstones`
//! and `address_tombstones` (NIP-09: what stays deleted); `settings`, `audit`. And `hearth_put`,
//! the NIP-01/09 rules of one put as one statement, in the transaction of the batch it is part of
//! (`batch`), or alone: see `write`. Migration 2 added it and `events.recipient` (a gift wrap's one
//! recipient, who may delete it). Migration 3 added `hearth_put_plain`: a run of events that touch
//! nothing but themselves (regular kinds, no deletion) stored by one statement, as set operations
//! (the tombstones checked, the rows and their tags inserted, duplicates skipped by the id's unique
//! index), each event's outcome in order. Migration 4 added `media`: one row per key's upload of a
//! blob (`media.store = "s3"`: every node reads the same records), keyed by hash then owner, with
//! an index by owner. Migration 5 replaced the foreign key from `tags` to `events` by a trigger: a
//! statement that deletes events deletes their tags (as the key's `ON DELETE CASCADE` did), and a
//! tag row is no longer checked against `events` as it is inserted (one lookup and one row lock a
//! tag, about a seventh of the server's work a put at 400k events): tags are only ever inserted by
//! `hearth_put` and `hearth_put_plain`, beside their event, with the `seq` its insert returned.
//! Migration 6 rebuilt the two indexes by author (`events_author`, `events_author_kind`) without
//! their trailing `id`: half their size, cheaper to fill; an author's events of one second are put
//! in id order by an incremental sort of that second's rows. `events_time` and `events_kind` keep
//! the `id`: every feed reads them, and without it a second crowded by many keys (events dated up
//! to `created_at_upper_limit` ahead, all alike) would be read and sorted whole by each feed's
//! page, 6–9 ms for 10,000 events; by author, only a read naming the crowding key pays.
//! Migration 7 rebuilt `tags_value` carrying each row's `seq` beside its key (`INCLUDE`): a page
//! driven by a tag fetches each event by `seq`, the table's own key, whose b-tree of 8-byte keys
//! is a third the size of the id's and keeps a room's recent events side by side, where the id's
//! are scattered; reading `seq` from the index spares a visit to the tag's row.

use tokio_postgres::Client;

use super::error::PgError;

/// The key of the advisory lock that migrations run under.
const MIGRATION_LOCK: i64 = 0x6865_6172_7468_0001;

/// Every migration, in order; the schema version is how many have run.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
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
"#,
    r#"
ALTER TABLE events ADD COLUMN recipient BYTEA;
CREATE FUNCTION hearth_put(
    p_id BYTEA, p_pubkey BYTEA, p_kind INTEGER, p_created_at BIGINT, p_expiration BIGINT,
    p_address BYTEA, p_json TEXT, p_recipient BYTEA, p_tag_names TEXT[], p_tag_values BYTEA[],
    p_locks BIGINT[], p_e_targets BYTEA[], p_a_targets BYTEA[]
) RETURNS TABLE (outcome TEXT, removed BYTEA[]) LANGUAGE plpgsql AS $$
DECLARE
    lock_key BIGINT;
    current_id BYTEA;
    current_at BIGINT;
    deleted_until BIGINT;
    new_seq BIGINT;
    target BYTEA;
    gone BYTEA[] := '{}';
    gone_id BYTEA;
BEGIN
    FOREACH lock_key IN ARRAY p_locks LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
    IF EXISTS (SELECT 1 FROM events WHERE id = p_id) THEN
        RETURN QUERY SELECT 'duplicate'::TEXT, gone;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM tombstones WHERE id = p_id AND (deleter = p_pubkey OR deleter = p_recipient)) THEN
        RETURN QUERY SELECT 'deleted'::TEXT, gone;
        RETURN;
    END IF;
    IF p_address IS NOT NULL THEN
        SELECT deleted_at INTO deleted_until FROM address_tombstones WHERE address = p_address;
        IF FOUND AND p_created_at <= deleted_until THEN
            RETURN QUERY SELECT 'deleted'::TEXT, gone;
            RETURN;
        END IF;
        SELECT id, created_at INTO current_id, current_at FROM events WHERE address = p_address;
        IF FOUND THEN
            -- Newest wins; at equal created_at the lowest id wins.
            IF current_at > p_created_at OR (current_at = p_created_at AND current_id < p_id) THEN
                RETURN QUERY SELECT 'superseded'::TEXT, gone;
                RETURN;
            END IF;
            DELETE FROM events WHERE id = current_id;
            gone := gone || current_id;
        END IF;
    END IF;
    INSERT INTO events (id, pubkey, kind, created_at, expiration, address, json, recipient)
        VALUES (p_id, p_pubkey, p_kind, p_created_at, p_expiration, p_address, p_json, p_recipient)
        RETURNING seq INTO new_seq;
    INSERT INTO tags (seq, name, value, created_at, id)
        SELECT new_seq, n, v, p_created_at, p_id FROM unnest(p_tag_names, p_tag_values) AS x(n, v)
        ON CONFLICT DO NOTHING;
    -- NIP-09: the author's own targets (a gift wrap's, its recipient's), never a deletion.
    FOREACH target IN ARRAY p_e_targets LOOP
        DELETE FROM events WHERE id = target AND kind <> 5 AND (pubkey = p_pubkey OR recipient = p_pubkey)
            RETURNING id INTO gone_id;
        IF FOUND THEN
            gone := gone || gone_id;
        END IF;
        INSERT INTO tombstones (id, deleter) VALUES (target, p_pubkey) ON CONFLICT DO NOTHING;
    END LOOP;
    FOREACH target IN ARRAY p_a_targets LOOP
        INSERT INTO address_tombstones (address, deleted_at) VALUES (target, p_created_at)
            ON CONFLICT (address) DO UPDATE
            SET deleted_at = GREATEST(address_tombstones.deleted_at, EXCLUDED.deleted_at);
        FOR gone_id IN DELETE FROM events WHERE address = target AND created_at <= p_created_at RETURNING id LOOP
            gone := gone || gone_id;
        END LOOP;
    END LOOP;
    RETURN QUERY SELECT 'stored'::TEXT, gone;
END
$$;
"#,
    r#"
CREATE FUNCTION hearth_put_plain(
    p_ids BYTEA[], p_pubkeys BYTEA[], p_kinds INTEGER[], p_created_at BIGINT[],
    p_expirations BIGINT[], p_jsons TEXT[], p_recipients BYTEA[], p_locks BIGINT[],
    p_tag_of BIGINT[], p_tag_names TEXT[], p_tag_values BYTEA[]
) RETURNS TEXT[] LANGUAGE plpgsql AS $$
DECLARE
    outcomes TEXT[];
BEGIN
    PERFORM pg_advisory_xact_lock(k) FROM unnest(p_locks) AS k ORDER BY k;
    -- Every step a join (hashed), none a scan of another step per row: a batch of n events
    -- costs n, not n squared.
    WITH input AS (
        SELECT * FROM unnest(p_ids, p_pubkeys, p_kinds, p_created_at, p_expirations, p_jsons, p_recipients)
            WITH ORDINALITY AS i(id, pubkey, kind, created_at, expiration, json, recipient, n)
    ), deleted AS (
        SELECT DISTINCT i.n FROM input i JOIN tombstones t
            ON t.id = i.id AND (t.deleter = i.pubkey OR t.deleter = i.recipient)
    ), stored AS (
        INSERT INTO events (id, pubkey, kind, created_at, expiration, json, recipient)
            SELECT id, pubkey, kind, created_at, expiration, json, recipient FROM input i
            WHERE NOT EXISTS (SELECT 1 FROM deleted d WHERE d.n = i.n) ORDER BY n
            ON CONFLICT (id) DO NOTHING
            RETURNING seq, id, created_at
    ), tagged AS (
        INSERT INTO tags (seq, name, value, created_at, id)
            SELECT s.seq, t.name, t.value, s.created_at, s.id
            FROM stored s JOIN input i ON i.id = s.id
            JOIN unnest(p_tag_of, p_tag_names, p_tag_values) AS t(n, name, value) ON t.n = i.n
            ON CONFLICT DO NOTHING
    )
    SELECT array_agg(CASE
            WHEN s.id IS NOT NULL THEN 'stored'
            WHEN d.n IS NOT NULL THEN 'deleted'
            ELSE 'duplicate' END ORDER BY i.n)
        INTO outcomes
        FROM input i LEFT JOIN stored s ON s.id = i.id LEFT JOIN deleted d ON d.n = i.n;
    RETURN outcomes;
END
$$;
"#,
    r#"
CREATE TABLE media (
    sha256     BYTEA NOT NULL,
    owner      BYTEA NOT NULL,
    size       BIGINT NOT NULL,
    media_type TEXT NOT NULL,
    uploaded   BIGINT NOT NULL,
    PRIMARY KEY (sha256, owner)
);
CREATE INDEX media_owner ON media (owner, uploaded DESC, sha256);
"#,
    r#"
ALTER TABLE tags DROP CONSTRAINT IF EXISTS tags_seq_fkey;
CREATE FUNCTION hearth_drop_tags() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tags t USING gone g WHERE t.seq = g.seq;
    RETURN NULL;
END
$$;
CREATE TRIGGER events_drop_tags AFTER DELETE ON events REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION hearth_drop_tags();
"#,
    // Built beside the old ones, which serve reads until the swap; then dropped and renamed.
    r#"
CREATE INDEX events_author_6 ON events (pubkey, created_at DESC);
CREATE INDEX events_author_kind_6 ON events (pubkey, kind, created_at DESC);
DROP INDEX events_author, events_author_kind;
ALTER INDEX events_author_6 RENAME TO events_author;
ALTER INDEX events_author_kind_6 RENAME TO events_author_kind;
"#,
    r#"
CREATE INDEX tags_value_7 ON tags (name, value, created_at DESC, id) INCLUDE (seq);
DROP INDEX tags_value;
ALTER INDEX tags_value_7 RENAME TO tags_value;
"#,
];

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
        let version = i32::try_from(n + 1).unwrap_or(i32::MAX);
        // Said before it runs: one that rebuilds indexes holds the start for seconds.
        tracing::info!(version, "PostgreSQL schema: migrating");
        let started = std::time::Instant::now();
        tx.batch_execute(migration).await?;
        tx.execute("INSERT INTO hearth_schema (version) VALUES ($1)", &[&version]).await?;
        tracing::info!(
            version,
            ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "PostgreSQL schema migrated"
        );
    }
    tx.commit().await?;
    Ok(())
}
