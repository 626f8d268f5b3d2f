//! A long step of an open or a migration that says it is still at work.

use std::time::Duration;

/// How often a long start-up step logs its progress.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// A start-up step that says it is still at work: `what` logged at `info` every few seconds until
/// the guard is dropped, so an operator watching a slow start sees which step it is in.
pub(crate) struct Progress {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    pub(crate) fn every_few_seconds(what: &'static str) -> Progress {
        let (done, rx) = std::sync::mpsc::channel::<()>();
        let started = std::time::Instant::now();
        let thread = std::thread::Builder::new()
            .name("hearth-progress".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(PROGRESS_EVERY) {
                    tracing::info!(seconds = started.elapsed().as_secs(), "{what}: still working");
                }
            })
            .ok();
        Progress { done: Some(done), thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
