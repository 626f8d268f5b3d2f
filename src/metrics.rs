//! Prometheus metrics: the process-wide recorder and its text rendering for `GET /metrics`.
//!
//! Owns installing the `metrics` recorder once per process. Every module records through the
//! `metrics` macros; nothing here is formatted by hand.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets of `hearth_admission_seconds` (admission is sub-microsecond to a few microseconds).
const ADMISSION_BUCKETS: &[f64] = &[1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 1e-4, 1e-3];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder (first call only) and returns its handle, if one could be installed.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full("hearth_admission_seconds".into()), ADMISSION_BUCKETS);
            match builder.and_then(|b| b.install_recorder()) {
                Ok(handle) => Some(handle),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics recorder not installed");
                    None
                }
            }
        })
        .clone()
}

/// What the process's allocator says of its heap.
#[derive(Clone, Copy, Debug)]
pub struct Heap {
    /// Bytes the program holds allocated.
    pub allocated: u64,
    /// Bytes of memory the allocator holds from the system for them (freed pages it has not
    /// given back yet included).
    pub resident: u64,
}

static HEAP: OnceLock<fn() -> Option<Heap>> = OnceLock::new();

/// Names the function that reads the heap: the binary's allocator (jemalloc) knows it; a program
/// that embeds the relay with another allocator reports none.
pub fn report_heap_with(read: fn() -> Option<Heap>) {
    let _ = HEAP.set(read);
}

/// The current metrics in Prometheus text format, with the process's resident memory and heap as
/// of now.
pub fn render() -> String {
    if let Some(bytes) = resident_bytes() {
        metrics::gauge!("process_resident_memory_bytes").set(bytes as f64);
    }
    if let Some(heap) = HEAP.get().and_then(|read| read()) {
        metrics::gauge!("hearth_heap_allocated_bytes").set(heap.allocated as f64);
        metrics::gauge!("hearth_heap_resident_bytes").set(heap.resident as f64);
    }
    install().map(|h| h.render()).unwrap_or_default()
}

/// The process's resident memory (`VmRSS` of `/proc/self/status`; None where there is none):
/// what the operator of a small box watches, and what a flood's buffers were seen to hold.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
