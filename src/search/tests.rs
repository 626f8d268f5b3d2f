//! The search index's unit tests: ranking, the query language, narrowing, live matching.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;
use crate::protocol::search::parse;
use crate::protocol::{Event, Filter, Timestamp};
use crate::protocol::{Keys, Kind};

fn corpus() -> (SearchIndex, Vec<Event>) {
    let keys = Keys::test(7);
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
    index.commit(Position::default()).unwrap();
    (index, events)
}

fn order(index: &SearchIndex, events: &[Event], q: &str) -> Vec<usize> {
    let found = index.search(&parse(q, 256).unwrap(), &Filter::default(), 0, 10).unwrap();
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
    let keys = Keys::test(8);
    let twins: Vec<Event> = (0..3).map(|i| keys.sign(Timestamp(2000 + i), Kind(1), vec![], "twin")).collect();
    for e in &twins {
        index.add(e).unwrap();
    }
    index.commit(Position::default()).unwrap();
    let found = index.search(&parse("twin", 256).unwrap(), &Filter::default(), 0, 10).unwrap();
    let ats: Vec<u64> = found.iter().map(|f| f.created_at.0).collect();
    assert_eq!(ats, [2002, 2001, 2000]);
    index.remove(&twins[2].id);
    index.remove(&events[3].id);
    index.commit(Position::default()).unwrap();
    let found = index.search(&parse("twin", 256).unwrap(), &Filter::default(), 0, 1).unwrap();
    assert_eq!(found.iter().map(|f| f.id).collect::<Vec<_>>(), [twins[1].id]);
    assert!(order(&index, &events, "東京").is_empty());
    assert_eq!(index.len(), 7);
}

#[test]
fn a_search_is_narrowed_by_the_filters_other_fields_and_pages_in_rank_order() {
    let (index, events) = corpus();
    let q = parse("meetup", 256).unwrap();
    let since = Filter { since: Some(Timestamp(1002)), ..Filter::default() };
    let found: Vec<_> = index.search(&q, &since, 0, 10).unwrap().iter().map(|f| f.id).collect();
    assert_eq!(found, [events[2].id, events[4].id].iter().copied().filter(|id| found.contains(id)).collect::<Vec<_>>());
    assert_eq!(found.len(), 2);
    let kinds = Filter { kinds: Some(vec![Kind(30023)]), ..Filter::default() };
    assert!(index.search(&q, &kinds, 0, 10).unwrap().is_empty());
    let all = index.search(&q, &Filter::default(), 0, 10).unwrap();
    let paged: Vec<_> = (0..4).flat_map(|skip| index.search(&q, &Filter::default(), skip, 1).unwrap()).collect();
    assert_eq!(paged, all);
    let mut counted = index.all(&q, &Filter::default()).unwrap();
    counted.sort();
    let mut ranked: Vec<_> = all.iter().map(|f| f.id).collect();
    ranked.sort();
    assert_eq!(counted, ranked);
}

#[test]
fn a_live_event_matches_as_the_index_would_find_it() {
    let (index, events) = corpus();
    for q in [
        "meetup",
        "\"the cafe\"",
        "CAFÉ meetup",
        "meetup -friday",
        "meet*",
        "東京",
        "会い",
        "京都",
        "—",
        "planning -read",
    ] {
        let parsed = parse(q, 256).unwrap();
        let mut by_index: Vec<_> =
            index.search(&parsed, &Filter::default(), 0, 10).unwrap().iter().map(|f| f.id).collect();
        let mut by_match: Vec<_> = events.iter().filter(|e| matches(&parsed, e)).map(|e| e.id).collect();
        by_index.sort();
        by_match.sort();
        assert_eq!(by_match, by_index, "{q}");
    }
}

#[test]
fn a_commit_records_the_position_the_index_is_complete_up_to() {
    let dir = tempfile::tempdir().unwrap();
    let at = Position { generation: 2, end: 4096 };
    {
        let index = SearchIndex::open(dir.path(), 15_000_000).unwrap();
        assert_eq!(index.position().unwrap(), None);
        index.commit(at).unwrap();
    }
    let index = SearchIndex::open(dir.path(), 15_000_000).unwrap();
    assert_eq!(index.position().unwrap(), Some(at));
    // Of other kinds than it is now to hold: none (it is rebuilt).
    let index = index.holding(&[Kind(1)]);
    assert_eq!(index.position().unwrap(), None);
    index.commit(at).unwrap();
    assert_eq!(index.position().unwrap(), Some(at));
}

#[test]
fn the_filters_fields_narrow_without_changing_the_ranking() {
    let (index, events) = corpus();
    // One long article that mentions it once: the only event of its kind, so the kind's term is
    // rare, and would outweigh the text if the kind scored.
    let keys = Keys::test(9);
    let article =
        keys.sign(Timestamp(3000), Kind(30023), vec![], "a long text of many words that says meetup only once");
    index.add(&article).unwrap();
    index.commit(Position::default()).unwrap();
    let q = parse("meetup", 256).unwrap();
    let all: Vec<_> = index.search(&q, &Filter::default(), 0, 10).unwrap();
    let kinds = Filter { kinds: Some(vec![Kind(1), Kind(30023)]), since: Some(Timestamp(0)), ..Filter::default() };
    let narrowed: Vec<_> = index.search(&q, &kinds, 0, 10).unwrap();
    assert_eq!(narrowed, all);
    assert_eq!(all.first().map(|f| f.id), Some(events[1].id));
    assert_eq!(all.last().map(|f| f.id), Some(article.id));
}

#[test]
fn ids_narrow_exactly_and_a_removal_then_an_add_before_the_commit_keeps_the_event() {
    let (index, events) = corpus();
    let q = parse("meetup", 256).unwrap();
    let ids = Filter { ids: Some(vec![events[1].id, events[3].id]), ..Filter::default() };
    let found: Vec<_> = index.search(&q, &ids, 0, 10).unwrap().iter().map(|f| f.id).collect();
    assert_eq!(found, [events[1].id]);
    assert_eq!(index.all(&q, &ids).unwrap(), [events[1].id]);
    // Taken down, then restored, within one commit interval: it stays.
    index.remove(&events[1].id);
    index.add(&events[1]).unwrap();
    // Removed (and not added back) in the same interval: it goes, whichever came first.
    index.add(&events[5]).unwrap();
    index.remove(&events[0].id);
    index.commit(Position::default()).unwrap();
    let found: Vec<_> = index.search(&q, &Filter::default(), 0, 10).unwrap().iter().map(|f| f.id).collect();
    assert!(found.contains(&events[1].id), "{found:?}");
    assert!(!found.contains(&events[0].id), "{found:?}");
    assert_eq!(index.len(), 6);
}
