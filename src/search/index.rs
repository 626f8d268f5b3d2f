//! The search index itself: a tantivy index of events' text, and its queries.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::index::SegmentId;
use tantivy::query::{BooleanQuery, Occur, PhraseQuery, Query, RegexQuery, TermQuery};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::{DocId, Index, IndexReader, IndexWriter, Score, SegmentReader, TantivyDocument, Term};

use super::analyzer::{self, terms};
use crate::protocol::search::{Part, SearchQuery};
use crate::protocol::{Event, EventId, Timestamp};

/// Tags whose values are searched with the content (NIP-23 title and summary, NIP-14 subject,
/// hashtags).
const TEXT_TAGS: [&str; 4] = ["title", "summary", "subject", "t"];

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

/// One event a query found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The event.
    pub id: EventId,
    /// Its relevance (BM25).
    pub score: f32,
    /// Its `created_at`, which breaks ties of score.
    pub created_at: Timestamp,
}

/// The fields of the index.
#[derive(Clone, Copy, Debug)]
struct Fields {
    id: Field,
    created_at: Field,
    text: Field,
}

/// The full-text index of events.
pub struct SearchIndex {
    index: Index,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
    fields: Fields,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex").finish_non_exhaustive()
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let id = builder.add_bytes_field("id", STORED | INDEXED);
    let created_at = builder.add_u64_field("created_at", FAST);
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer::NAME)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    let text = builder.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    (builder.build(), Fields { id, created_at, text })
}

impl SearchIndex {
    /// An index in memory (tests, `hearth dev`), its writer given `memory_bytes`.
    pub fn in_memory(memory_bytes: usize) -> Result<SearchIndex, SearchError> {
        let (schema, fields) = schema();
        SearchIndex::with(Index::create_in_ram(schema), fields, memory_bytes)
    }

    /// The index in `dir`, created when there is none.
    pub fn open(dir: &Path, memory_bytes: usize) -> Result<SearchIndex, SearchError> {
        std::fs::create_dir_all(dir).map_err(|e| SearchError::Directory(format!("{}: {e}", dir.display())))?;
        let (schema, fields) = schema();
        let directory = tantivy::directory::MmapDirectory::open(dir)
            .map_err(|e| SearchError::Directory(format!("{}: {e}", dir.display())))?;
        let index = Index::open_or_create(directory, schema)?;
        SearchIndex::with(index, fields, memory_bytes)
    }

    fn with(index: Index, fields: Fields, memory_bytes: usize) -> Result<SearchIndex, SearchError> {
        index.tokenizers().register(analyzer::NAME, analyzer::analyzer());
        let writer = index.writer(memory_bytes)?;
        let reader = index.reader_builder().reload_policy(tantivy::ReloadPolicy::Manual).try_into()?;
        Ok(SearchIndex { index, writer: Mutex::new(writer), reader, fields })
    }

    /// Adds `event` (searchable after the next [`SearchIndex::commit`]).
    pub fn add(&self, event: &Event) -> Result<(), SearchError> {
        let mut text = event.content.clone();
        for tag in &event.tags {
            if let (Some(name), Some(value)) = (tag.first(), tag.get(1))
                && TEXT_TAGS.contains(&name.as_str())
            {
                text.push('\n');
                text.push_str(value);
            }
        }
        let mut doc = TantivyDocument::default();
        doc.add_bytes(self.fields.id, event.id.0.as_slice());
        doc.add_u64(self.fields.created_at, event.created_at.0);
        doc.add_text(self.fields.text, &text);
        self.writer().add_document(doc)?;
        Ok(())
    }

    /// Removes the event `id` (at the next commit).
    pub fn remove(&self, id: &EventId) {
        self.writer().delete_term(Term::from_field_bytes(self.fields.id, &id.0));
    }

    /// Makes what was added and removed durable and searchable.
    pub fn commit(&self) -> Result<(), SearchError> {
        self.writer().commit()?;
        self.reader.reload()?;
        Ok(())
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, IndexWriter> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `limit` most relevant events for `query`, most relevant first (ties: newest first).
    ///
    /// Excluded parts are found first and sorted last, not given to tantivy as `MustNot`: a
    /// phrase under `MustNot` trips tantivy 0.27's phrase scorer (its seek is asked to go back).
    pub fn search(&self, query: &SearchQuery, limit: usize) -> Result<Vec<Found>, SearchError> {
        let Some((required, excluded)) = self.build(query)? else { return Ok(Vec::new()) };
        let searcher = self.reader.searcher();
        let mut out: HashSet<(SegmentId, DocId)> = HashSet::new();
        for q in &excluded {
            for address in searcher.search(q.as_ref(), &DocSetCollector)? {
                out.insert((searcher.segment_reader(address.segment_ord).segment_id(), address.doc_id));
            }
        }
        let out = Arc::new(out);
        let skipped = out.len();
        let by_score_then_time =
            TopDocs::with_limit(limit.saturating_add(skipped).max(1)).tweak_score(move |segment: &SegmentReader| {
                let at = segment.fast_fields().u64("created_at").ok().map(|c| c.first_or_default_col(0));
                let (segment, out) = (segment.segment_id(), out.clone());
                move |doc: DocId, score: Score| {
                    let at = at.as_ref().map_or(0, |c| c.get_val(doc));
                    if out.contains(&(segment, doc)) { (Score::NEG_INFINITY, at) } else { (score, at) }
                }
            });
        let top = searcher.search(required.as_ref(), &by_score_then_time)?;
        let mut found = Vec::with_capacity(top.len().min(limit));
        for ((score, at), address) in top {
            if score == Score::NEG_INFINITY || found.len() == limit {
                break;
            }
            let doc: TantivyDocument = searcher.doc(address)?;
            let id =
                doc.get_first(self.fields.id).and_then(|v| v.as_bytes()).and_then(|b| <[u8; 32]>::try_from(b).ok());
            if let Some(id) = id {
                found.push(Found { id: EventId(id), score, created_at: Timestamp(at) });
            }
        }
        Ok(found)
    }

    /// `query`'s required parts as tantivy's (each a `Must`), and its excluded parts (as
    /// positive queries); None when nothing required has a term (e.g. only punctuation).
    #[allow(clippy::type_complexity)]
    fn build(&self, query: &SearchQuery) -> Result<Option<(Box<dyn Query>, Vec<Box<dyn Query>>)>, SearchError> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for part in &query.required {
            if let Some(q) = self.part(part)? {
                clauses.push((Occur::Must, q));
            }
        }
        if clauses.is_empty() {
            return Ok(None);
        }
        let mut excluded = Vec::new();
        for part in &query.excluded {
            excluded.extend(self.part(part)?);
        }
        Ok(Some((Box::new(BooleanQuery::new(clauses)), excluded)))
    }

    /// One part: a word or phrase as a term or a phrase of its terms (a CJK word is a phrase of
    /// its pairs), a prefix as its terms with the last one's completions.
    fn part(&self, part: &Part) -> Result<Option<Box<dyn Query>>, SearchError> {
        let field = self.fields.text;
        let term = |t: &str| Term::from_field_text(field, t);
        let exact = |words: Vec<String>| -> Option<Box<dyn Query>> {
            match words.len() {
                0 => None,
                1 => Some(Box::new(TermQuery::new(term(&words[0]), IndexRecordOption::WithFreqs))),
                _ => Some(Box::new(PhraseQuery::new(words.iter().map(|w| term(w)).collect()))),
            }
        };
        Ok(match part {
            Part::Word(text) | Part::Phrase(text) => exact(terms(text)),
            Part::Prefix(text) => {
                let mut words = terms(text);
                let Some(last) = words.pop() else { return Ok(None) };
                let completions = RegexQuery::from_pattern(&format!("{}.*", regex_escape(&last)), field)?;
                let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, Box::new(completions))];
                clauses.extend(exact(words).map(|q| (Occur::Must, q)));
                Some(Box::new(BooleanQuery::new(clauses)))
            }
        })
    }

    /// Events in the index (committed).
    pub fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Whether it holds no committed event.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index's schema, for a rebuild's check that an index on disk is this one's.
    pub fn matches_schema(&self) -> bool {
        self.index.schema() == schema().0
    }
}

/// `text` with the regex syntax's special characters escaped.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~\"@<>".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::search::parse;
    use crate::protocol::{Keys, Kind};

    fn corpus() -> (SearchIndex, Vec<Event>) {
        let keys = Keys::from_bytes([7; 32]).unwrap();
        let texts: [(&str, &[&[&str]]); 6] = [
            ("The meetup is on Friday at the café", &[]),
            ("Meetup notes: meetup, meetup and more meetup", &[]),
            ("nothing to see here", &[&["t", "meetup"]]),
            ("東京で会いましょう", &[]),
            ("A long read", &[&["title", "Planning the next Meetup"]]),
            ("meeting minutes", &[]),
        ];
        let index = SearchIndex::in_memory(15_000_000).unwrap();
        let events: Vec<Event> = texts
            .iter()
            .enumerate()
            .map(|(i, (content, tags))| {
                let tags = tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect()).collect();
                keys.sign(Timestamp(1000 + i as u64), Kind(1), tags, content)
            })
            .collect();
        for e in &events {
            index.add(e).unwrap();
        }
        index.commit().unwrap();
        (index, events)
    }

    fn order(index: &SearchIndex, events: &[Event], q: &str) -> Vec<usize> {
        let found = index.search(&parse(q, 256).unwrap(), 10).unwrap();
        found.iter().map(|f| events.iter().position(|e| e.id == f.id).unwrap()).collect()
    }

    #[test]
    fn ranked_by_relevance_with_phrases_exclusions_prefixes_folding_and_cjk() {
        let (index, events) = corpus();
        // The most meetups first; the tag and title count as text.
        let ranked = order(&index, &events, "meetup");
        assert_eq!(ranked[0], 1, "{ranked:?}");
        assert_eq!(ranked.len(), 4, "{ranked:?}");
        assert_eq!(order(&index, &events, "\"the cafe\""), [0]);
        assert_eq!(order(&index, &events, "CAFÉ meetup"), [0]);
        assert_eq!(order(&index, &events, "meetup -friday -\"long read\"").len(), 2);
        let mut prefixed = order(&index, &events, "meet*");
        prefixed.sort_unstable();
        assert_eq!(prefixed, [0, 1, 2, 4, 5]);
        assert_eq!(order(&index, &events, "東京"), [3]);
        assert_eq!(order(&index, &events, "会い"), [3]);
        assert!(order(&index, &events, "京都").is_empty());
        assert!(order(&index, &events, "—").is_empty());
    }

    #[test]
    fn ties_of_score_go_newest_first_and_removed_events_are_gone() {
        let (index, events) = corpus();
        let keys = Keys::from_bytes([8; 32]).unwrap();
        let twins: Vec<Event> = (0..3).map(|i| keys.sign(Timestamp(2000 + i), Kind(1), vec![], "twin")).collect();
        for e in &twins {
            index.add(e).unwrap();
        }
        index.commit().unwrap();
        let found = index.search(&parse("twin", 256).unwrap(), 10).unwrap();
        let ats: Vec<u64> = found.iter().map(|f| f.created_at.0).collect();
        assert_eq!(ats, [2002, 2001, 2000]);
        index.remove(&twins[2].id);
        index.remove(&events[3].id);
        index.commit().unwrap();
        let found = index.search(&parse("twin", 256).unwrap(), 1).unwrap();
        assert_eq!(found.iter().map(|f| f.id).collect::<Vec<_>>(), [twins[1].id]);
        assert!(order(&index, &events, "東京").is_empty());
        assert_eq!(index.len(), 7);
    }
}
