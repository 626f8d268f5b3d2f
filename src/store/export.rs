//! An export's reading: what `Store::export` hands out, whichever backend reads it.
//!
//! Owns [`Export`] (an iterator of stored events, oldest first, from one snapshot) and
//! [`ExportPages`], what a backend implements to fill it: the embedded backend reads records of
//! one event log, PostgreSQL reads pages from one repeatable-read transaction.

use super::error::StoreError;
use crate::protocol::EventJson;

/// A snapshot of stored events being read out in order (`Store::export`).
pub struct Export(Box<dyn ExportPages>);

/// How a backend reads an export.
pub(crate) trait ExportPages: Send {
    /// How many events are left to read.
    fn remaining(&self) -> usize;
    /// The next event, oldest first; a damaged one is left out (logged), never served.
    fn next_event(&mut self) -> Option<Result<EventJson, StoreError>>;
}

impl Export {
    /// An export `pages` reads.
    pub(crate) fn paged(pages: Box<dyn ExportPages>) -> Export {
        Export(pages)
    }

    /// How many events are left to read.
    pub fn remaining(&self) -> usize {
        self.0.remaining()
    }
}

impl Iterator for Export {
    type Item = Result<EventJson, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_event()
    }
}
