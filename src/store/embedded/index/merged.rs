//! Several ordered lists of postings read as one, in order: a scan's segments and memory.

use crate::store::error::StoreError;
use crate::store::format::Serial;

/// One ordered source of postings (`u64::MAX - created_at`, serial, record length or 0).
pub(crate) type Source<'a> = Box<dyn Iterator<Item = Result<(u64, Serial, u32), StoreError>> + 'a>;

/// Several ordered sources as one (sources hold disjoint serials).
pub(crate) struct Merged<'a> {
    sources: Vec<Source<'a>>,
    heads: Vec<Option<(u64, Serial, u32)>>,
    started: bool,
}

impl<'a> Merged<'a> {
    pub(crate) fn new(sources: Vec<Source<'a>>) -> Merged<'a> {
        let heads = vec![None; sources.len()];
        Merged { sources, heads, started: false }
    }

    fn advance(&mut self, i: usize) -> Result<(), StoreError> {
        self.heads[i] = self.sources[i].next().transpose()?;
        Ok(())
    }
}

impl Iterator for Merged<'_> {
    type Item = Result<(u64, Serial, u32), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                if let Err(e) = self.advance(i) {
                    return Some(Err(e));
                }
            }
        }
        let (at, head) =
            self.heads.iter().enumerate().filter_map(|(i, h)| h.map(|h| (i, h))).min_by_key(|&(_, h)| h)?;
        if let Err(e) = self.advance(at) {
            return Some(Err(e));
        }
        Some(Ok(head))
    }
}
