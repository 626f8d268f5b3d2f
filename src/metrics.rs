//! Prometheus metrics: the process-wide recorder and its text rendering for `GET /metrics`.
//!
//! Owns installing the `metrics` recorder once per process. Every module records through the
//! `metrics` macros; nothing here is formatted by hand.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder (first call only) and returns its handle, if one could be installed.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::warn!(error = %e, "metrics recorder not installed");
                None
            }
        })
        .clone()
}

/// The current metrics in Prometheus text format.
pub fn render() -> String {
    install().map(|h| h.render()).unwrap_or_default()
}
