//! The PostgreSQL backend's one error, and what the store's callers see of it.
//!
//! Owns [`PgError`] and its mapping into [`StoreError`]: a server that cannot be reached is
//! [`StoreError::Unavailable`] (a client is told to try again; REST answers 503), anything else
//! the database refused is [`StoreError::Postgres`].

use crate::store::error::StoreError;

/// The PostgreSQL backend's failures.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The database answered with an error, or the connection failed.
    #[error("PostgreSQL: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool (the server is down or refusing).
    #[error("PostgreSQL: no connection: {0}")]
    Pool(String),
    /// `storage.postgres_url` does not parse.
    #[error("storage.postgres_url: {0}; write it as postgres://user:password@host:port/database")]
    Url(String),
    /// The database was migrated by a newer hearth.
    #[error(
        "PostgreSQL: the database has schema version {found}, this hearth knows {known}: run the newer hearth, or restore a backup into an empty database"
    )]
    Newer {
        /// The version found.
        found: usize,
        /// The newest this hearth knows.
        known: usize,
    },
    /// An event could not be written out as JSON.
    #[error("PostgreSQL: cannot encode an event: {0}")]
    Encode(String),
    /// The backend's runtime has stopped.
    #[error("PostgreSQL: the store is closed")]
    Stopped,
}

impl PgError {
    /// True for a deadlock or a serialisation failure: the transaction may simply run again.
    pub(super) fn is_retryable(&self) -> bool {
        let PgError::Db(e) = self else { return false };
        e.code().is_some_and(|c| {
            *c == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                || *c == tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
        })
    }
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> StoreError {
        match &e {
            // No connection, or one that broke: the server is away, not the request wrong.
            PgError::Pool(_) | PgError::Stopped => StoreError::Unavailable(e.to_string()),
            PgError::Db(db) if db.is_closed() || db.code().is_none() => StoreError::Unavailable(e.to_string()),
            _ => StoreError::Postgres(e.to_string()),
        }
    }
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> PgError {
        match e {
            deadpool_postgres::PoolError::Backend(e) => PgError::Db(e),
            other => PgError::Pool(other.to_string()),
        }
    }
}
