//! How text becomes search terms, alike for what is indexed and what is asked.
//!
//! Owns the analyzer: Unicode word segmentation (UAX #29, the `unicode-segmentation` crate), each
//! run of CJK characters (Han, kana, Hangul: written without spaces) split into overlapping
//! two-character terms as CJK search engines do, so `東京` finds `東京で会いましょう`; then
//! lowercase and diacritics folded to ASCII where an ASCII form exists (tantivy's filters), so
//! `Café` and `cafe` are one term.

use tantivy::tokenizer::{
    AsciiFoldingFilter, LowerCaser, RemoveLongFilter, TextAnalyzer, Token, TokenStream, Tokenizer,
};
use unicode_segmentation::UnicodeSegmentation;

/// The name the analyzer is registered under in an index.
pub const NAME: &str = "hearth";

/// Terms longer than this many bytes are dropped (a base64 blob is not a word anyone searches).
const LONGEST_TERM: usize = 64;

/// The analyzer, to register under [`NAME`].
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(Words::default())
        .filter(RemoveLongFilter::limit(LONGEST_TERM))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

/// The terms of `text`, as the index holds them.
pub fn terms(text: &str) -> Vec<String> {
    let mut analyzer = analyzer();
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// Unicode words, CJK runs as overlapping pairs. It keeps the spans of the text it last split, so
/// that indexing a document allocates nothing per word.
#[derive(Clone, Debug, Default)]
struct Words {
    spans: Vec<(usize, usize)>,
}

/// The words of one text: each span in turn as a token, written into one reused token.
struct WordStream<'a> {
    text: &'a str,
    spans: std::slice::Iter<'a, (usize, usize)>,
    token: Token,
}

impl TokenStream for WordStream<'_> {
    fn advance(&mut self) -> bool {
        let Some(&(from, to)) = self.spans.next() else { return false };
        self.token.text.clear();
        self.token.text.push_str(&self.text[from..to]);
        self.token.offset_from = from;
        self.token.offset_to = to;
        // Token::default()'s position is usize::MAX: the first word is at 0.
        self.token.position = self.token.position.wrapping_add(1);
        true
    }

    fn token(&self) -> &Token {
        &self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.token
    }
}

impl Tokenizer for Words {
    type TokenStream<'a> = WordStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> WordStream<'a> {
        let spans = &mut self.spans;
        spans.clear();
        let mut push = |from: usize, to: usize| spans.push((from, to));
        // UAX #29 makes each Han or kana character a word of its own: adjacent ones are joined
        // back into their run first.
        let mut run: Option<(usize, usize)> = None;
        for (at, word) in text.unicode_word_indices() {
            let end = at + word.len();
            if word.is_ascii() {
                if let Some((from, to)) = run.take() {
                    split_cjk(&text[from..to], from, &mut push);
                }
                push(at, end);
                continue;
            }
            let all_cjk = word.chars().all(is_cjk);
            match run {
                Some((from, to)) if all_cjk && to == at => run = Some((from, end)),
                _ => {
                    if let Some((from, to)) = run.take() {
                        split_cjk(&text[from..to], from, &mut push);
                    }
                    if all_cjk {
                        run = Some((at, end));
                    } else {
                        split_cjk(word, at, &mut push);
                    }
                }
            }
        }
        if let Some((from, to)) = run {
            split_cjk(&text[from..to], from, &mut push);
        }
        WordStream { text, spans: self.spans.iter(), token: Token::default() }
    }
}

/// Emits `word` (at byte `at` of the text) whole, or its CJK runs as overlapping pairs of
/// characters (a lone CJK character as itself) and its other runs whole.
fn split_cjk(word: &str, at: usize, push: &mut impl FnMut(usize, usize)) {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let cjk = is_cjk(chars[i].1);
        let start = i;
        while i < chars.len() && is_cjk(chars[i].1) == cjk {
            i += 1;
        }
        let end_byte = |k: usize| chars.get(k).map_or(word.len(), |(b, _)| *b);
        if !cjk || i - start == 1 {
            push(at + chars[start].0, at + end_byte(i));
        } else {
            for (k, (byte, _)) in chars.iter().enumerate().take(i - 1).skip(start) {
                push(at + byte, at + end_byte(k + 2));
            }
        }
    }
}

/// Han, Hiragana, Katakana and Hangul: scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3400..=0x4DBF   // CJK Extension A
        | 0x4E00..=0x9FFF   // CJK Unified Ideographs
        | 0xF900..=0xFAFF   // CJK Compatibility Ideographs
        | 0xAC00..=0xD7AF   // Hangul syllables
        | 0x1100..=0x11FF   // Hangul Jamo
        | 0x20000..=0x2FA1F // CJK Extensions B–F, Compatibility Supplement
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_folded_and_cjk_runs_are_paired() {
        assert_eq!(terms("The Café, naïve RÉSUMÉ!"), ["the", "cafe", "naive", "resume"]);
        assert_eq!(terms("東京で会いましょう"), ["東京", "京で", "で会", "会い", "いま", "まし", "しょ", "ょう"]);
        assert_eq!(terms("東京 tokyo"), ["東京", "tokyo"]);
        assert_eq!(terms("猫"), ["猫"]);
        assert_eq!(terms("서울에서 만나요"), ["서울", "울에", "에서", "만나", "나요"]);
        // Numbers and words with apostrophes stay whole (UAX #29); punctuation goes.
        assert_eq!(terms("it's 12.30 — meet@home"), ["it's", "12.30", "meet", "home"]);
        let blob = "A".repeat(100);
        assert_eq!(terms(&format!("x {blob}")), ["x"]);
    }
}
