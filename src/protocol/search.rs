//! NIP-50's query language: what a filter's `"search": "…"` asks for, parsed.
//!
//! Owns reading the text into [`SearchQuery`]: words (all must match), `"quoted phrases"`,
//! `-excluded` words or phrases, `prefix*` words, and the `key:value` extensions NIP-50 defines
//! (`language:xx`, `include:spam`; any other `key:value` is ignored, as NIP-50 says). Words are
//! kept as written: case and diacritic folding and word segmentation are the index's analyzer's,
//! applied alike to what is indexed and to what is asked, so they cannot disagree.

use std::fmt;

/// One thing to look for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A word, as written.
    Word(String),
    /// A word's beginning (`meet*`), as written without the `*`.
    Prefix(String),
    /// Words in this order, next to each other (`"the meetup"`), as written between the quotes.
    Phrase(String),
}

/// A parsed `search` value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// What every result must match.
    pub required: Vec<Part>,
    /// What no result may match.
    pub excluded: Vec<Part>,
    /// `language:xx`: only events in this language (ISO 639-1, lowercase).
    pub language: Option<String>,
    /// `include:spam`: the relay's spam filtering off for this query.
    pub include_spam: bool,
}

/// Why a `search` value is refused (a REQ/COUNT gets `CLOSED "invalid: <this>"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchError {
    /// Longer than `limits.max_search_chars` characters.
    TooLong {
        /// The bound.
        max: usize,
    },
    /// Nothing to look for: empty, or only extensions and exclusions.
    NoWords,
    /// `language:` with something other than two letters.
    BadLanguage(String),
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SearchError::TooLong { max } => write!(f, "search is longer than {max} characters"),
            SearchError::NoWords => write!(f, "search has no word to look for"),
            SearchError::BadLanguage(got) => {
                write!(f, "search: language:{got} is not a two-letter language code (ISO 639-1)")
            }
        }
    }
}

impl std::error::Error for SearchError {}

/// Reads `text` (at most `max_chars` characters).
pub fn parse(text: &str, max_chars: usize) -> Result<SearchQuery, SearchError> {
    if text.chars().count() > max_chars {
        return Err(SearchError::TooLong { max: max_chars });
    }
    let mut query = SearchQuery::default();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (negated, after) = match rest.strip_prefix('-') {
            Some(after) if after.starts_with(|c: char| !c.is_whitespace() && c != '-') => (true, after),
            _ => (false, rest),
        };
        let (part, after) = match after.strip_prefix('"') {
            // An unterminated quote runs to the end.
            Some(quoted) => {
                let end = quoted.find('"').unwrap_or(quoted.len());
                let phrase = quoted[..end].trim();
                let after = quoted.get(end + 1..).unwrap_or("");
                ((!phrase.is_empty()).then(|| Part::Phrase(phrase.to_string())), after)
            }
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                let (token, after) = after.split_at(end);
                (word(token, negated, &mut query)?, after)
            }
        };
        if let Some(part) = part {
            if negated { query.excluded.push(part) } else { query.required.push(part) }
        }
        rest = after.trim_start();
    }
    if query.required.is_empty() {
        return Err(SearchError::NoWords);
    }
    Ok(query)
}

/// One unquoted token: an extension (applied to `query`, `None`), or a word or prefix.
fn word(token: &str, negated: bool, query: &mut SearchQuery) -> Result<Option<Part>, SearchError> {
    if let Some((key, value)) = token.split_once(':')
        && !negated
        && !key.is_empty()
        && key.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c == '-')
    {
        match key {
            "language" => {
                if value.len() != 2 || !value.chars().all(|c| c.is_ascii_alphabetic()) {
                    return Err(SearchError::BadLanguage(value.to_string()));
                }
                query.language = Some(value.to_ascii_lowercase());
            }
            "include" if value == "spam" => query.include_spam = true,
            // Unknown extensions (and unknown values of known ones) are ignored (NIP-50).
            _ => {}
        }
        return Ok(None);
    }
    let stem = token.trim_end_matches('*');
    Ok(match (stem.len() < token.len(), stem.is_empty()) {
        (_, true) => None,
        (true, false) => Some(Part::Prefix(stem.to_string())),
        (false, false) => Some(Part::Word(token.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(parts: &[&str]) -> Vec<Part> {
        parts.iter().map(|w| Part::Word(w.to_string())).collect()
    }

    #[test]
    fn words_phrases_exclusions_prefixes_and_extensions() {
        let q = parse(r#"Meetup  "the café" -friday -"next week" meet* language:EN include:spam nostr:npub1x"#, 500)
            .unwrap();
        assert_eq!(
            q.required,
            vec![Part::Word("Meetup".into()), Part::Phrase("the café".into()), Part::Prefix("meet".into())]
        );
        assert_eq!(q.excluded, vec![Part::Word("friday".into()), Part::Phrase("next week".into())]);
        assert_eq!((q.language.as_deref(), q.include_spam), (Some("en"), true));
    }

    #[test]
    fn edge_cases_are_read_as_a_person_means_them() {
        // A lone dash, a time and a URL are words; an unterminated quote runs to the end.
        assert_eq!(parse("a - b", 50).unwrap().required, words(&["a", "-", "b"]));
        assert_eq!(parse("at 12:30", 50).unwrap().required, words(&["at", "12:30"]));
        assert_eq!(
            parse(r#"x "open phrase"#, 50).unwrap().required,
            vec![Part::Word("x".into()), Part::Phrase("open phrase".into())]
        );
        assert_eq!(parse("東京 café", 50).unwrap().required, words(&["東京", "café"]));
        assert_eq!(parse("x ***", 50).unwrap().required, words(&["x"]));
        // include: with another value, and unknown keys, are ignored.
        let q = parse("x include:nsfw sort:new", 50).unwrap();
        assert_eq!((q.required, q.include_spam), (words(&["x"]), false));
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(parse("", 10), Err(SearchError::NoWords));
        assert_eq!(parse("  -only language:de ", 50), Err(SearchError::NoWords));
        assert_eq!(parse(r#""" x"#, 50).unwrap().required, words(&["x"]));
        assert_eq!(parse("ééééé", 4), Err(SearchError::TooLong { max: 4 }));
        assert!(parse("ééééé", 5).is_ok());
        let bad = parse("x language:english", 50).unwrap_err();
        assert_eq!(bad.to_string(), "search: language:english is not a two-letter language code (ISO 639-1)");
        assert_eq!(SearchError::TooLong { max: 256 }.to_string(), "search is longer than 256 characters");
    }
}
