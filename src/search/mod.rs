//! NIP-50 full-text search: the index of events' text, and a query of it.
//!
//! Owns [`SearchIndex`] (a tantivy index in a directory of its own, or in memory): what is
//! indexed of an event (its `content` and its `title`, `summary`, `subject` and `t` tags, by the
//! [`analyzer`]), adding and removing events, and answering a parsed
//! [`crate::protocol::search::SearchQuery`] with event ids in descending relevance (BM25; ties by
//! `created_at`, newest first). Imports only `protocol`.
//!
//! Not served yet (issue 34): the store's writer does not feed it and REQ does not ask it.

pub mod analyzer;
mod index;

pub use index::{Found, SearchError, SearchIndex};
