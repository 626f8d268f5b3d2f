//! The WebSocket transport: upgrade, the per-connection loop, one handler per verb, and
//! per-connection session state.
//!
//! Owns translating frames to typed messages and back for one connection. It calls
//! [`crate::ingest`] and [`crate::query`], and the fan-out registry for live events; it holds no
//! global state of its own.

pub(crate) mod conn;
mod handle;
mod neg;
mod session;
pub(crate) mod upgrade;
