//! The overlay of one write group: the changes of writes not yet in sled, read through by later
//! writes of the same group, and the log frames they add.
//!
//! Owns reading through the overlay, keeping a failed write's changes apart, and committing a
//! whole group: its frames synced to the event log first, then one sled batch with the log's new
//! end, then the in-memory index; and an id's catalogue entry as the group sees it. The rules
//! that decide what a write changes are `apply`'s.

use std::collections::HashMap;
use std::sync::Arc;

use sled::{Batch, IVec, Tree};

use crate::protocol::EventId;
use crate::search::{Change, Feed};
use crate::store::embedded::catalogue::Places;
use crate::store::embedded::index::IndexOp;
use crate::store::error::StoreError;
use crate::store::format::bucket::{find, key, with, without};
use crate::store::format::log::{self, Log};
use crate::store::format::segment::MAX_SERIAL;
use crate::store::format::{Serial, keys};

/// The writes of one group not yet in sled, read through by later writes of the same group.
/// Changes of the write in progress stay apart until it succeeds, so a write that fails halfway
/// leaves nothing behind. New records collect as log frames that go after the log's committed
/// end (`start`); a record's serial is where its frame will be.
pub(crate) struct Pending<'t> {
    pub(crate) tree: &'t Tree,
    log: &'t Log,
    /// Where this group's frames start: the log's committed end when the group began.
    pub(crate) start: Serial,
    /// How the catalogue's stored places read, and how this group's are written.
    pub(crate) places: Places,
    group: HashMap<Vec<u8>, Option<Vec<u8>>>,
    group_frames: Vec<u8>,
    group_index: Vec<IndexOp>,
    op: HashMap<Vec<u8>, Option<Vec<u8>>>,
    op_frames: Vec<u8>,
    pub(crate) op_index: Vec<IndexOp>,
    /// The search index's feed (the writer's groups only): what it wants is collected below.
    pub(crate) search: Option<Arc<Feed>>,
    group_search: Vec<Change>,
    pub(crate) op_search: Vec<Change>,
    /// The search changes of the groups applied, for the writer to send on.
    pub(crate) applied_search: Vec<Change>,
}

impl<'t> Pending<'t> {
    /// A group after the log's committed end, whose catalogue's places read as `places` say.
    pub(crate) fn new(tree: &'t Tree, log: &'t Log, places: Places) -> Pending<'t> {
        Pending {
            tree,
            log,
            start: log.end(),
            places,
            group: HashMap::new(),
            group_frames: Vec::new(),
            group_index: Vec::new(),
            op: HashMap::new(),
            op_frames: Vec::new(),
            op_index: Vec::new(),
            search: None,
            group_search: Vec::new(),
            op_search: Vec::new(),
            applied_search: Vec::new(),
        }
    }

    /// A change to the search index, when it is kept and wants events of `kind`.
    pub(crate) fn search_change(&mut self, kind: crate::protocol::Kind, change: impl FnOnce() -> Change) {
        if self.search.as_ref().is_some_and(|feed| feed.wants(kind)) {
            self.op_search.push(change());
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<IVec>, StoreError> {
        match self.op.get(key).or_else(|| self.group.get(key)) {
            Some(value) => Ok(value.as_deref().map(IVec::from)),
            None => Ok(self.tree.get(key)?),
        }
    }

    pub(crate) fn insert(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.op.insert(key.into(), Some(value.into()));
    }

    pub(crate) fn remove(&mut self, key: impl Into<Vec<u8>>) {
        self.op.insert(key.into(), None);
    }

    /// Adds a frame to the log frames of the write in progress; returns its serial.
    pub(crate) fn push_frame(&mut self, payload: &[u8]) -> Serial {
        let serial = self.start + (self.group_frames.len() + self.op_frames.len()) as u64;
        log::push_frame(&mut self.op_frames, payload);
        serial
    }

    /// The record at `serial`: from this group's frames, or from the log.
    pub(crate) fn record(&self, serial: Serial) -> Result<Vec<u8>, StoreError> {
        let Some(at) = serial.checked_sub(self.start) else { return Ok(self.log.read(serial)?) };
        let at = usize::try_from(at).map_err(|_| StoreError::Corrupt("serial".into()))?;
        let found = match at.checked_sub(self.group_frames.len()) {
            None => log::frame_in(&self.group_frames, at),
            Some(at) => log::frame_in(&self.op_frames, at),
        };
        found.map(<[u8]>::to_vec).ok_or_else(|| StoreError::Corrupt(format!("no pending record at {serial}")))
    }

    /// Ends the write in progress: keeps its changes when it succeeded, drops them otherwise.
    pub(crate) fn finish<T>(&mut self, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        if outcome.is_ok() {
            self.group.extend(self.op.drain());
            self.group_frames.append(&mut self.op_frames);
            self.group_index.append(&mut self.op_index);
            self.group_search.append(&mut self.op_search);
        } else {
            self.op.clear();
            self.op_frames.clear();
            self.op_index.clear();
            self.op_search.clear();
        }
        outcome
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.group.is_empty()
    }

    /// Drops the frames of a group that failed: they must not be read, nor replayed after a crash.
    fn cut(&self) {
        if let Err(e) = self.log.truncate(self.start) {
            tracing::error!(error = %e, "cutting the frames of a failed group off the event log failed");
        }
        self.log.commit(self.start);
    }

    /// Writes the group's frames to the log and syncs them (the commit point), applies its sled
    /// changes and the log's new end as one atomic batch; returns the changes to the index that
    /// follow (`Indexes::apply`). A group that fails leaves no frames behind it in
    /// the log.
    pub(crate) fn apply(&mut self) -> Result<Vec<IndexOp>, StoreError> {
        let frames = std::mem::take(&mut self.group_frames);
        let end = self.start + frames.len() as u64;
        if end >= MAX_SERIAL {
            self.group.clear();
            return Err(StoreError::LogFull);
        }
        let ops = std::mem::take(&mut self.group_index);
        let search = std::mem::take(&mut self.group_search);
        let mut batch = Batch::default();
        for (key, value) in self.group.drain() {
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
        batch.insert(&keys::meta(keys::LOG_END)[..], &end.to_be_bytes()[..]);
        if !frames.is_empty() {
            if let Err(e) = self.log.write(self.start, &frames) {
                self.cut();
                return Err(StoreError::Log(log::LogError::Io(e)));
            }
            // Readable before sled points at them: whoever finds a new `i` entry can read its frame.
            self.log.commit(end);
        }
        if let Err(e) = self.tree.apply_batch(batch) {
            // Only this group's own frames are cut: a replay's group has none, and the frames
            // after its position are acknowledged writes.
            if !frames.is_empty() {
                self.cut();
            }
            return Err(e.into());
        }
        self.start = end;
        self.applied_search.extend(search);
        Ok(ops)
    }
}

/// The serial of `id` as a write group sees it (its own changes first).
pub(crate) fn pending_get(p: &Pending, id: &EventId) -> Result<Option<Serial>, StoreError> {
    match p.get(&key(id))? {
        Some(bucket) => find(&bucket, id)?.map(|place| p.places.resolve(place)).transpose(),
        None => Ok(None),
    }
}

/// Records `id` at `serial` in a write group.
pub(crate) fn pending_insert(p: &mut Pending, id: &EventId, serial: Serial) -> Result<(), StoreError> {
    let key = key(id);
    let bucket = with(p.get(&key)?.as_deref(), id, p.places.encode(serial))?;
    p.insert(key, bucket);
    Ok(())
}

/// Drops `id` in a write group.
pub(crate) fn pending_remove(p: &mut Pending, id: &EventId) -> Result<(), StoreError> {
    let key = key(id);
    let Some(bucket) = p.get(&key)? else { return Ok(()) };
    match without(&bucket, id)? {
        Some(rest) if rest.is_empty() => p.remove(key),
        Some(rest) => p.insert(key, rest),
        None => {}
    }
    Ok(())
}
