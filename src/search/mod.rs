//! NIP-50 full-text search: the index of events' text, the thread that keeps it in step with
//! the store, and a query of it.
//!
//! Owns [`SearchIndex`] (a tantivy index in a directory of its own, or in memory): what is
//! indexed of an event (its `content` and its `title`, `summary`, `subject` and `t` tags, by the
//! [`analyzer`]), adding and removing events, and answering a parsed
//! [`crate::protocol::search::SearchQuery`] with event ids in descending relevance (BM25; ties by
//! `created_at`, newest first); [`Feed`], the one thread that writes it. It knows nothing of the
//! store: the store's writer feeds it and checks every event it finds (see `store`'s search
//! read path). Imports only `protocol`.

pub mod analyzer;
mod feed;
mod index;
mod query;
#[cfg(test)]
mod tests;

/// The directory of the search index, inside the data directory (the store's size figures leave
/// it out: a compaction does not change it).
pub const SEARCH_DIR: &str = "search";

pub use feed::{CatchUp, Change, Feed, SearchState, Source};
pub use index::{Position, SearchError, SearchIndex};
pub use query::matches;
