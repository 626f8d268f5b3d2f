//! Asking the search index: a parsed NIP-50 query, narrowed by the rest of its filter, answered
//! most relevant first; and the same question of one event, for live delivery.
//!
//! Owns turning a [`SearchQuery`] into tantivy's queries (a word or phrase is a phrase of its
//! terms, a prefix a regex over the last one's completions), narrowing them by the filter's
//! `ids`, `kinds`, `authors`, `since` and `until` inside the index (its tag conditions are the
//! store's to check), ranking (BM25, ties newest first), and [`matches`].

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::index::SegmentId;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, PhraseQuery, Query, RangeQuery, RegexQuery, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, DocId, Score, Searcher, SegmentReader, Term};

use super::analyzer::terms;
use super::index::{IdColumns, SearchError, SearchIndex, ids_query, languages_of, text_of};
use crate::protocol::search::{Part, SearchQuery};
use crate::protocol::{Event, EventId, Filter, Timestamp};

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

/// How many more than asked a search without exclusions ranks: its ties of score at the cut go
/// newest first among these (more equal scores than this at the cut is two dozen copies of one
/// text).
const TIE_SLACK: usize = 32;

/// A query's parts as tantivy's: what must match (with the filter's narrowing), and what must not.
struct Built {
    required: Box<dyn Query>,
    excluded: Vec<Box<dyn Query>>,
}

impl SearchIndex {
    /// The events for `query` within `filter`'s ids, kinds, authors, since and until, most
    /// relevant first (ties: newest first): the `take` after the first `skip`.
    ///
    /// Without exclusions tantivy's own top-k collector ranks (block-max WAND skips what cannot
    /// reach the top, where a collector that looks at each match's time must score every match),
    /// with 32 more than asked, and the ties among them go newest first. Excluded parts
    /// are found first and sorted last, not given to tantivy as `MustNot`: a phrase under
    /// `MustNot` trips tantivy 0.27's phrase scorer (its seek is asked to go back).
    pub fn search(
        &self,
        query: &SearchQuery,
        filter: &Filter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<Found>, SearchError> {
        let Some(built) = self.build(query, filter)? else { return Ok(Vec::new()) };
        let searcher = self.reader.searcher();
        let out = Arc::new(excluded(&searcher, &built)?);
        let wanted = skip.saturating_add(take).saturating_add(out.len()).max(1);
        let ranked: Vec<(Score, u64, DocAddress)> = if out.is_empty() {
            let top = TopDocs::with_limit(wanted.saturating_add(TIE_SLACK)).order_by_score();
            let mut ranked = Vec::new();
            let mut times = HashMap::new();
            for (score, address) in searcher.search(built.required.as_ref(), &top)? {
                let column = match times.entry(address.segment_ord) {
                    Entry::Occupied(column) => column.into_mut(),
                    Entry::Vacant(slot) => {
                        let fast = searcher.segment_reader(address.segment_ord).fast_fields();
                        slot.insert(fast.u64("created_at")?.first_or_default_col(0))
                    }
                };
                ranked.push((score, column.get_val(address.doc_id), address));
            }
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
            ranked
        } else {
            let by_score_then_time = TopDocs::with_limit(wanted).tweak_score(move |segment: &SegmentReader| {
                let at = segment.fast_fields().u64("created_at").ok().map(|c| c.first_or_default_col(0));
                let (segment, out) = (segment.segment_id(), out.clone());
                move |doc: DocId, score: Score| {
                    let at = at.as_ref().map_or(0, |c| c.get_val(doc));
                    if out.contains(&(segment, doc)) { (Score::NEG_INFINITY, at) } else { (score, at) }
                }
            });
            let top = searcher.search(built.required.as_ref(), &by_score_then_time)?;
            top.into_iter().map(|((score, at), address)| (score, at, address)).collect()
        };
        let mut found = Vec::with_capacity(ranked.len().min(take));
        let mut ids = Ids::new(&searcher);
        for (score, at, address) in ranked.into_iter().skip(skip) {
            if score == Score::NEG_INFINITY || found.len() == take {
                break;
            }
            found.push(Found { id: ids.at(address)?, score, created_at: Timestamp(at) });
        }
        Ok(found)
    }

    /// Every event for `query` within `filter`'s narrowing, in no order (NIP-45's count).
    pub fn all(&self, query: &SearchQuery, filter: &Filter) -> Result<Vec<EventId>, SearchError> {
        let Some(built) = self.build(query, filter)? else { return Ok(Vec::new()) };
        let searcher = self.reader.searcher();
        let out = excluded(&searcher, &built)?;
        let mut found = Vec::new();
        let mut ids = Ids::new(&searcher);
        for address in searcher.search(built.required.as_ref(), &DocSetCollector)? {
            let segment = searcher.segment_reader(address.segment_ord).segment_id();
            if !out.contains(&(segment, address.doc_id)) {
                found.push(ids.at(address)?);
            }
        }
        Ok(found)
    }

    /// `query` as tantivy's, narrowed by `filter`; None when nothing required has a term (only
    /// punctuation, say) or the filter can match nothing.
    fn build(&self, query: &SearchQuery, filter: &Filter) -> Result<Option<Built>, SearchError> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for part in &query.required {
            if let Some(q) = self.part(part)? {
                clauses.push((Occur::Must, q));
            }
        }
        if clauses.is_empty() || filter.is_empty_set() {
            return Ok(None);
        }
        let f = self.fields;
        // The filter's fields narrow, they do not rank: a rare kind or author must not lift a
        // note above a more relevant one.
        let any_of = |terms: Vec<Term>| -> Box<dyn Query> {
            let should = terms
                .into_iter()
                .map(|t| (Occur::Should, Box::new(TermQuery::new(t, IndexRecordOption::Basic)) as Box<dyn Query>));
            Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(should.collect())), 0.0))
        };
        if let Some(ids) = &filter.ids {
            let ids = ids_query(ids.iter().copied().collect());
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(Box::new(ids), 0.0))));
        }
        if let Some(kinds) = &filter.kinds {
            let kinds = kinds.iter().map(|k| Term::from_field_u64(f.kind, u64::from(k.0)));
            clauses.push((Occur::Must, any_of(kinds.collect())));
        }
        if let Some(authors) = &filter.authors {
            let authors = authors.iter().map(|a| Term::from_field_bytes(f.pubkey, &a.0));
            clauses.push((Occur::Must, any_of(authors.collect())));
        }
        if filter.since.is_some() || filter.until.is_some() {
            let bound = |at: Option<Timestamp>| match at {
                Some(at) => Bound::Included(Term::from_field_u64(f.created_at, at.0)),
                None => Bound::Unbounded,
            };
            let range = RangeQuery::new(bound(filter.since), bound(filter.until));
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(Box::new(range), 0.0))));
        }
        if let Some(language) = &query.language {
            clauses.push((Occur::Must, any_of(vec![Term::from_field_bytes(f.language, language.as_bytes())])));
        }
        let mut excluded = Vec::new();
        for part in &query.excluded {
            excluded.extend(self.part(part)?);
        }
        Ok(Some(Built { required: Box::new(BooleanQuery::new(clauses)), excluded }))
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
}

/// The ids of documents a search found, read from their segments' columns.
struct Ids<'a> {
    searcher: &'a Searcher,
    /// Each segment's columns, opened when first read.
    segments: HashMap<u32, IdColumns>,
}

impl<'a> Ids<'a> {
    fn new(searcher: &'a Searcher) -> Ids<'a> {
        Ids { searcher, segments: HashMap::new() }
    }

    fn at(&mut self, address: DocAddress) -> Result<EventId, SearchError> {
        let columns = match self.segments.entry(address.segment_ord) {
            Entry::Occupied(columns) => columns.into_mut(),
            Entry::Vacant(slot) => slot.insert(IdColumns::of(self.searcher.segment_reader(address.segment_ord))?),
        };
        Ok(columns.id(address.doc_id))
    }
}

/// The documents any excluded part matches.
fn excluded(searcher: &Searcher, built: &Built) -> Result<HashSet<(SegmentId, DocId)>, SearchError> {
    let mut out = HashSet::new();
    for q in &built.excluded {
        for address in searcher.search(q.as_ref(), &DocSetCollector)? {
            out.insert((searcher.segment_reader(address.segment_ord).segment_id(), address.doc_id));
        }
    }
    Ok(out)
}

/// True when `event`'s text matches `query` as the index would find it: every required part
/// and no excluded one (a live event, for a subscription that searches; the filter's other
/// fields are the caller's to check). A part with no terms matches nothing, as in the index.
pub fn matches(query: &SearchQuery, event: &Event) -> bool {
    let text = terms(&text_of(event));
    let has = |part: &Part| {
        let (mut words, prefix) = match part {
            Part::Word(t) | Part::Phrase(t) => (terms(t), false),
            Part::Prefix(t) => (terms(t), true),
        };
        let Some(last) = words.pop() else { return false };
        text.windows(words.len() + 1).any(|window| {
            let (head, tail) = window.split_at(words.len());
            head == words.as_slice() && if prefix { tail[0].starts_with(&last) } else { tail[0] == last }
        })
    };
    let required: Vec<&Part> = query.required.iter().filter(|p| !part_terms(p).is_empty()).collect();
    let language = query.language.as_ref().is_none_or(|want| languages_of(event).any(|l| l == *want));
    language && !required.is_empty() && required.iter().all(|p| has(p)) && !query.excluded.iter().any(has)
}

fn part_terms(part: &Part) -> Vec<String> {
    match part {
        Part::Word(t) | Part::Phrase(t) | Part::Prefix(t) => terms(t),
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
