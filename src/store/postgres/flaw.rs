//! What `hearth check` can find wrong with one event a PostgreSQL store holds.
//!
//! Owns [`Flaw`]; `upkeep` finds them, `crate::store::check` reports and repairs them.

/// What `Pg::check` finds wrong with one stored event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// Its JSON does not decode, or its signature does not verify.
    Unreadable {
        /// The id column.
        id: String,
        /// Its row.
        seq: i64,
        /// Why.
        reason: String,
    },
    /// Its JSON is another event's.
    WrongId {
        /// The id column.
        id: String,
        /// Its row.
        seq: i64,
        /// The id the JSON holds.
        found: String,
    },
    /// Its author (a gift wrap's recipient) deleted it (NIP-09), yet it is stored.
    Deleted {
        /// The id.
        id: String,
    },
}
