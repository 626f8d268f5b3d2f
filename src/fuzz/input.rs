//! What every fuzz target shares: the fuzzer's bytes read as text, and a scratch directory for
//! the targets that write files.

/// The bytes as text, when they are UTF-8 (the relay reads only text frames and bodies as JSON).
pub(crate) fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A directory of this process's own for the files a target writes, emptied when dropped.
pub(crate) struct Scratch(pub(crate) std::path::PathBuf);

impl Scratch {
    pub(crate) fn new() -> Option<Scratch> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hearth-fuzz-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
