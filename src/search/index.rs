//! The search index itself: a tantivy index of events' text, and what it holds.
//!
//! Owns the schema (the id, kind, author and `created_at` of each event beside its text, so a
//! search is narrowed by a filter's other fields inside the index), adding an event (as an
//! upsert: one document per id whatever is sent twice), removing one, and commits, each carrying
//! the [`Position`] of the store it is complete up to. Queries are `query`'s.

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions};
use tantivy::{Index, IndexReader, IndexWriter, TantivyDocument, Term};

use super::analyzer;
use crate::protocol::{Event, EventId, Kind};

/// Tags whose values are searched with the content (NIP-23 title and summary, NIP-14 subject,
/// hashtags).
const TEXT_TAGS: [&str; 4] = ["title", "summary", "subject", "t"];

/// Bumped whenever the schema or the analyzer changes what a query finds: an index on disk of
/// another version is rebuilt.
const VERSION: u32 = 1;

/// The least memory tantivy's writer takes per indexing thread (its own floor, not exported).
pub const MIN_MEMORY_BYTES: usize = 15_000_000;

/// What went wrong in the search index.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// tantivy's own error (the index directory, a segment, a merge).
    #[error("search index: {0}")]
    Index(#[from] tantivy::TantivyError),
    /// The index's directory could not be opened.
    #[error("search index directory: {0}")]
    Directory(String),
}

/// How far into the store an index is complete: the event log's generation and its end, as the
/// store counts them. Every event stored before it and still stored is in the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    /// The event log's generation.
    pub generation: u64,
    /// The event log's end.
    pub end: u64,
}

/// What a commit records beside the documents.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Payload {
    version: u32,
    position: Position,
    /// The kinds it holds: an index of other kinds is rebuilt.
    #[serde(default)]
    kinds: Vec<u16>,
}

/// The fields of the index.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fields {
    pub(super) id: Field,
    pub(super) kind: Field,
    pub(super) pubkey: Field,
    pub(super) created_at: Field,
    pub(super) text: Field,
    pub(super) language: Field,
}

/// The full-text index of events.
pub struct SearchIndex {
    index: Index,
    writer: Mutex<IndexWriter>,
    pub(super) reader: IndexReader,
    pub(super) fields: Fields,
    /// The kinds it is to hold (see [`SearchIndex::holding`]), sorted.
    kinds: Vec<u16>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex").finish_non_exhaustive()
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let id = builder.add_bytes_field("id", STORED | INDEXED);
    let kind = builder.add_u64_field("kind", INDEXED);
    let pubkey = builder.add_bytes_field("pubkey", INDEXED);
    let created_at = builder.add_u64_field("created_at", FAST | INDEXED);
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer::NAME)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    let text = builder.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    let language = builder.add_bytes_field("language", INDEXED);
    (builder.build(), Fields { id, kind, pubkey, created_at, text, language })
}

/// The languages `event` is labelled with (NIP-32: `["l", "en", "ISO-639-1"]`), lowercase; no
/// language is guessed from the text.
pub fn languages_of(event: &Event) -> impl Iterator<Item = String> + '_ {
    event.tags.iter().filter_map(|tag| match tag.as_slice() {
        [l, code, namespace, ..] if l == "l" && namespace == "ISO-639-1" && code.len() == 2 => {
            Some(code.to_ascii_lowercase())
        }
        _ => None,
    })
}

/// The text of `event` that is searched: its content, then its text tags' values.
pub fn text_of(event: &Event) -> String {
    let mut text = event.content.clone();
    for tag in &event.tags {
        if let (Some(name), Some(value)) = (tag.first(), tag.get(1))
            && TEXT_TAGS.contains(&name.as_str())
        {
            text.push('\n');
            text.push_str(value);
        }
    }
    text
}

impl SearchIndex {
    /// An index in memory (tests), its writer given `memory_bytes`.
    #[cfg(test)]
    pub fn in_memory(memory_bytes: usize) -> Result<SearchIndex, SearchError> {
        let (schema, fields) = schema();
        SearchIndex::with(Index::create_in_ram(schema), fields, memory_bytes)
    }

    /// The index in `dir`, created when there is none; an index there of another schema is
    /// replaced by an empty one (its [`SearchIndex::position`] is then None, so it is rebuilt).
    pub fn open(dir: &Path, memory_bytes: usize) -> Result<SearchIndex, SearchError> {
        let open = || -> Result<Index, SearchError> {
            std::fs::create_dir_all(dir).map_err(|e| SearchError::Directory(format!("{}: {e}", dir.display())))?;
            let directory = tantivy::directory::MmapDirectory::open(dir)
                .map_err(|e| SearchError::Directory(format!("{}: {e}", dir.display())))?;
            Ok(Index::open_or_create(directory, schema().0)?)
        };
        let index = match open() {
            Err(e @ SearchError::Index(tantivy::TantivyError::SchemaError(_))) => {
                tracing::warn!(error = %e, dir = %dir.display(), "the search index there is not this version's; it is rebuilt");
                std::fs::remove_dir_all(dir).map_err(|e| SearchError::Directory(format!("{}: {e}", dir.display())))?;
                open()?
            }
            other => other?,
        };
        SearchIndex::with(index, schema().1, memory_bytes)
    }

    fn with(index: Index, fields: Fields, memory_bytes: usize) -> Result<SearchIndex, SearchError> {
        index.tokenizers().register(analyzer::NAME, analyzer::analyzer());
        // One indexing thread: the relay's own threads need the other core more than indexing
        // needs a second one (docs/src/search.md).
        let writer = index.writer_with_num_threads(1, memory_bytes.max(MIN_MEMORY_BYTES))?;
        let reader = index.reader_builder().reload_policy(tantivy::ReloadPolicy::Manual).try_into()?;
        Ok(SearchIndex { index, writer: Mutex::new(writer), reader, fields, kinds: Vec::new() })
    }

    /// The index as one of the events of `kinds`: its commits record them, and
    /// [`SearchIndex::position`] is None when the last commit held other kinds (the store's
    /// `storage.search_kinds` changed: it is rebuilt).
    pub fn holding(mut self, kinds: &[Kind]) -> SearchIndex {
        self.kinds = kinds.iter().map(|k| k.0).collect();
        self.kinds.sort_unstable();
        self.kinds.dedup();
        self
    }

    /// Adds `event` (searchable after the next commit). Not an upsert: the store's writer sends
    /// each stored event once (a delete per add would double what each commit applies), and a
    /// reader that met an id twice keeps the first.
    pub fn add(&self, event: &Event) -> Result<(), SearchError> {
        let mut doc = TantivyDocument::default();
        doc.add_bytes(self.fields.id, event.id.0.as_slice());
        doc.add_u64(self.fields.kind, u64::from(event.kind.0));
        doc.add_bytes(self.fields.pubkey, event.pubkey.0.as_slice());
        doc.add_u64(self.fields.created_at, event.created_at.0);
        doc.add_text(self.fields.text, text_of(event));
        for language in languages_of(event) {
            doc.add_bytes(self.fields.language, language.as_bytes());
        }
        self.writer().add_document(doc)?;
        Ok(())
    }

    /// Removes the event `id` (at the next commit).
    pub fn remove(&self, id: &EventId) {
        self.writer().delete_term(Term::from_field_bytes(self.fields.id, &id.0));
    }

    /// Removes every document (at the next commit): a rebuild's start.
    pub fn clear(&self) -> Result<(), SearchError> {
        self.writer().delete_all_documents()?;
        Ok(())
    }

    /// Makes what was added and removed durable and searchable, recording `position`.
    pub fn commit(&self, position: Position) -> Result<(), SearchError> {
        let payload = serde_json::to_string(&Payload { version: VERSION, position, kinds: self.kinds.clone() })
            .map_err(|e| SearchError::Directory(e.to_string()))?;
        {
            let mut writer = self.writer();
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&payload);
            prepared.commit()?;
        }
        self.reader.reload()?;
        Ok(())
    }

    /// The position the last commit recorded; None for a new index, or one of another version
    /// or other kinds.
    pub fn position(&self) -> Result<Option<Position>, SearchError> {
        let payload = self.index.load_metas()?.payload;
        let payload = payload.and_then(|p| serde_json::from_str::<Payload>(&p).ok());
        Ok(payload.filter(|p| p.version == VERSION && p.kinds == self.kinds).map(|p| p.position))
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, IndexWriter> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Events in the index (committed).
    pub fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }
}
