//! The index merge thread: keeps the number of index segments logarithmic in the store's size.
//!
//! Owns merging the two newest segments whenever the newer has half the older's postings
//! (`Indexes::merge_due`), off the writer and the readers: the merged file is written and synced
//! while both go on with the segments it replaces, then swapped in under the view's lock with the
//! catalogue's record of the segment list, and the old files are removed only once that record
//! is durable. A compaction meanwhile (another log generation) makes the merge moot: its file is
//! removed. After a compaction's swap it first writes the previous generation's segments out
//! again at the new serials (`Indexes::old_inputs`), the same way. The writer wakes it after each
//! segment it writes and after a swap, and waits for it when it stops.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;

use super::control::Control;
use super::shared::Shared;
use crate::store::db::flush_durably;
use crate::store::embedded::index::segments::{merge_into, rewrite_old as rewrite_segments};
use crate::store::embedded::view::View;
use crate::store::error::StoreError;
use crate::store::format::durable::Durable;
use crate::store::format::moves::Moves;
use crate::store::format::remove_if_there;
use crate::store::format::segment::Segment;

struct Merger {
    db: sled::Db,
    tree: sled::Tree,
    view: Arc<RwLock<View>>,
    durable: Option<Arc<Durable>>,
    dir: PathBuf,
    control: Arc<Control>,
}

/// Starts the merge thread of the store `w` shares (none for a temporary store, whose index stays
/// in memory); a send on the channel wakes it.
pub(crate) fn spawn(w: &Shared) -> (Sender<()>, Option<JoinHandle<()>>) {
    let (tx, rx) = channel();
    let Some(dir) = w.dir.clone() else { return (tx, None) };
    let m = Merger {
        db: w.db.clone(),
        tree: w.tree.clone(),
        view: w.view.clone(),
        durable: w.durable.clone(),
        dir,
        control: w.compaction.clone(),
    };
    match std::thread::Builder::new().name("hearth-merge".into()).spawn(move || run(m, rx)) {
        Ok(handle) => (tx, Some(handle)),
        Err(e) => {
            // Reads only get slower with more segments; the next start merges them.
            tracing::error!(error = %e, "the index merge thread did not start");
            (tx, None)
        }
    }
}

fn run(m: Merger, rx: Receiver<()>) {
    while rx.recv().is_ok() {
        loop {
            match merge_once(&m) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) if m.control.stopping.load(Ordering::Acquire) => return,
                Err(e) => {
                    tracing::error!(error = %e, "merging index segments failed; they stay as they are for now");
                    break;
                }
            }
        }
    }
}

/// Merges the segments due, if any; true when it did (or found the index changed under it).
fn merge_once(m: &Merger) -> Result<bool, StoreError> {
    if m.control.stopping.load(Ordering::Acquire) {
        return Ok(false);
    }
    let old = m.view.read().unwrap_or_else(PoisonError::into_inner).index.old_inputs();
    if let Some((inputs, moved, seq, generation)) = old {
        return rewrite_old(m, &inputs, &moved, seq, generation);
    }
    // A compaction's copy writes the log anew; merging the segments meanwhile is wasted work
    // (its swap keeps them as they are, to be rewritten at the new serials above).
    if m.control.is_running() {
        return Ok(false);
    }
    let (inputs, seq, generation) = {
        let view = m.view.read().unwrap_or_else(PoisonError::into_inner);
        let Some(at) = view.index.merge_due() else { return Ok(false) };
        let Some(inputs) = view.index.merge_inputs(at) else { return Ok(false) };
        inputs
    };
    let merged = match merge_into(&m.dir, generation, &inputs, seq, &m.control.stopping) {
        Ok(merged) => merged,
        // A compaction that started meanwhile removed the old generation's files.
        Err(_) if m.view.read().unwrap_or_else(PoisonError::into_inner).generation != generation => return Ok(true),
        Err(e) => return Err(e),
    };
    install(m, merged, &inputs, |view, merged| {
        view.generation == generation && view.index.replace_pair(&inputs, merged, seq)
    })?;
    Ok(true)
}

/// Puts `made` (a segment written from `inputs`) in their place with `replace`, records the new
/// list durably, then removes the inputs' files; when `replace` finds the index changed under
/// it (the work is moot), removes `made` instead and returns false.
fn install(
    m: &Merger,
    made: Segment,
    inputs: &[Arc<Segment>],
    replace: impl FnOnce(&mut View, Segment) -> bool,
) -> Result<bool, StoreError> {
    let path = made.path().to_path_buf();
    let mut view = m.view.write().unwrap_or_else(PoisonError::into_inner);
    if !replace(&mut view, made) {
        drop(view);
        remove_if_there(&path)?;
        return Ok(false);
    }
    view.index.meta().save(&m.tree)?;
    drop(view);
    flush_durably(&m.db, m.durable.as_deref())?;
    for old in inputs {
        // A compaction may have removed its generation's files meanwhile.
        remove_if_there(old.path())?;
    }
    Ok(true)
}

/// Writes the previous generation's segments `inputs` out again at their new serials and puts
/// the result in their place; true when it did (or found the index changed under it).
fn rewrite_old(
    m: &Merger,
    inputs: &[Arc<Segment>],
    moved: &Moves,
    seq: u64,
    generation: u64,
) -> Result<bool, StoreError> {
    let started = std::time::Instant::now();
    // The writer and the readers go on with the old segments meanwhile.
    let rewritten = rewrite_segments(&m.dir, generation, inputs, moved, seq, &m.control.stopping)?;
    if install(m, rewritten, inputs, |view, rewritten| view.index.replace_old(inputs, rewritten, seq))? {
        tracing::info!(
            segments = inputs.len(),
            ms = started.elapsed().as_millis() as u64,
            "the previous generation's index segments are rewritten at the new serials"
        );
    }
    Ok(true)
}
