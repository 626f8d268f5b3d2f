//! The search index itself: a tantivy index of events' text, and what it holds.
//!
//! Owns the schema (the id, kind, author and `created_at` of each event beside its text, so a
//! search is narrowed by a filter's other fields inside the index), adding an event, removing
//! one, and commits, each carrying the [`Position`] of the store it is complete up to. Queries
//! are `query`'s.
//!
//! What each document costs is the search's tax on the store (docs/src/search.md): only the text
//! has positions and norms (BM25 and phrases need them); the id is four 8-byte columns read by
//! document number, neither a stored document nor a term (a term per event made each segment's
//! term dictionary mostly ids); `created_at` is a column only (tantivy answers a range of a column
//! from the column). So a removal is a scan of the id columns: the removals of a commit are
//! gathered and made one scan at the commit ([`SearchIndex::remove`]).

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use tantivy::columnar::ColumnValues;
use tantivy::merge_policy::LogMergePolicy;
use tantivy::query::doc_predicate_query::{DocPredicateQuery, FunctionPredicate};
use tantivy::schema::{
    BytesOptions, FAST, Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{DocId, Index, IndexReader, IndexWriter, SegmentReader, TantivyDocument};

use super::analyzer;
use crate::protocol::{Event, EventId, Kind};

/// Tags whose values are searched with the content (NIP-23 title and summary, NIP-14 subject,
/// hashtags).
const TEXT_TAGS: [&str; 4] = ["title", "summary", "subject", "t"];

/// Bumped whenever the schema or the analyzer changes what a query finds: an index on disk of
/// another version is rebuilt.
const VERSION: u32 = 2;

/// The least memory tantivy's writer takes per indexing thread (its own floor, not exported).
pub const MIN_MEMORY_BYTES: usize = 15_000_000;
/// How many segments of one size tantivy's merges join at once.
const MERGE_AT: usize = 12;

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
    /// The id's four eight-byte parts, big-endian, first to last: columns.
    pub(super) id: [Field; 4],
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
    /// Events removed since the last commit, to be deleted at it in one scan.
    removing: Mutex<HashSet<EventId>>,
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
    // Terms without norms: only the text is scored.
    let term = NumericOptions::default().set_indexed();
    let id = ID_COLUMNS.map(|name| builder.add_u64_field(name, FAST));
    let kind = builder.add_u64_field("kind", term);
    let pubkey = builder.add_bytes_field("pubkey", BytesOptions::default().set_indexed());
    let created_at = builder.add_u64_field("created_at", FAST);
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer::NAME)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    let text = builder.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    let language = builder.add_bytes_field("language", BytesOptions::default().set_indexed());
    (builder.build(), Fields { id, kind, pubkey, created_at, text, language })
}

/// The names of the id's four columns, first to last.
const ID_COLUMNS: [&str; 4] = ["id", "id1", "id2", "id3"];

/// The id's eight-byte parts, first to last.
fn id_parts(id: &EventId) -> [u64; 4] {
    let mut parts = [0; 4];
    for (part, bytes) in parts.iter_mut().zip(id.0.chunks_exact(8)) {
        let mut eight = [0; 8];
        eight.copy_from_slice(bytes);
        *part = u64::from_be_bytes(eight);
    }
    parts
}

/// The documents of the events `ids`: a scan of each segment's id columns (its first part
/// compared first).
pub(super) fn ids_query(ids: HashSet<EventId>) -> DocPredicateQuery {
    let firsts: Arc<HashSet<u64>> = Arc::new(ids.iter().map(|id| id_parts(id)[0]).collect());
    let ids = Arc::new(ids);
    FunctionPredicate::from(move |segment: &SegmentReader| {
        let columns = IdColumns::of(segment)?;
        let (firsts, ids) = (firsts.clone(), ids.clone());
        Ok(move |doc: DocId| firsts.contains(&columns.0[0].get_val(doc)) && ids.contains(&columns.id(doc)))
    })
    .into()
}

/// A segment's id columns, to read a document's id by its number.
pub(super) struct IdColumns([Arc<dyn ColumnValues<u64>>; 4]);

impl IdColumns {
    /// `segment`'s id columns.
    pub(super) fn of(segment: &SegmentReader) -> tantivy::Result<IdColumns> {
        let fast = segment.fast_fields();
        let [a, b, c, d] = ID_COLUMNS;
        let column = |name: &str| Ok::<_, tantivy::TantivyError>(fast.u64(name)?.first_or_default_col(0));
        Ok(IdColumns([column(a)?, column(b)?, column(c)?, column(d)?]))
    }

    /// The id of document `doc`.
    pub(super) fn id(&self, doc: DocId) -> EventId {
        let mut id = [0; 32];
        for (bytes, column) in id.chunks_exact_mut(8).zip(&self.0) {
            bytes.copy_from_slice(&column.get_val(doc).to_be_bytes());
        }
        EventId(id)
    }
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
        let writer: IndexWriter = index.writer_with_num_threads(1, memory_bytes.max(MIN_MEMORY_BYTES))?;
        // A commit a second makes a segment a second under load; merging them 12 at a time (not
        // tantivy's 8) rewrites each event fewer times (docs/src/search.md).
        let mut merges = LogMergePolicy::default();
        merges.set_min_num_segments(MERGE_AT);
        writer.set_merge_policy(Box::new(merges));
        let reader = index.reader_builder().reload_policy(tantivy::ReloadPolicy::Manual).try_into()?;
        let removing = Mutex::new(HashSet::new());
        Ok(SearchIndex { index, writer: Mutex::new(writer), removing, reader, fields, kinds: Vec::new() })
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
        // Removed, then added again before the commit: the removal goes first, as it came.
        if self.removals().contains(&event.id) {
            self.delete_removed()?;
        }
        let mut doc = TantivyDocument::default();
        for (field, part) in self.fields.id.into_iter().zip(id_parts(&event.id)) {
            doc.add_u64(field, part);
        }
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

    /// Removes the event `id` at the next commit (every removal until then in one scan of the id
    /// columns).
    pub fn remove(&self, id: &EventId) {
        self.removals().insert(*id);
    }

    /// The removals gathered so far, handed to the writer as one deletion (kept for the next try
    /// if the writer refuses it).
    fn delete_removed(&self) -> Result<(), SearchError> {
        let ids = std::mem::take(&mut *self.removals());
        if ids.is_empty() {
            return Ok(());
        }
        let deleted = self.writer().delete_query(Box::new(ids_query(ids.clone())));
        if let Err(e) = deleted {
            self.removals().extend(ids);
            return Err(e.into());
        }
        Ok(())
    }

    /// Removes every document (at the next commit): a rebuild's start.
    pub fn clear(&self) -> Result<(), SearchError> {
        self.removals().clear();
        self.writer().delete_all_documents()?;
        Ok(())
    }

    /// Makes what was added and removed durable and searchable, recording `position`.
    pub fn commit(&self, position: Position) -> Result<(), SearchError> {
        let payload = serde_json::to_string(&Payload { version: VERSION, position, kinds: self.kinds.clone() })
            .map_err(|e| SearchError::Directory(e.to_string()))?;
        self.delete_removed()?;
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

    fn removals(&self) -> std::sync::MutexGuard<'_, HashSet<EventId>> {
        self.removing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Events in the index (committed).
    pub fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }
}
