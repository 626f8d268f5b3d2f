//! The WebSocket transport: upgrade, per-connection loop and per-connection session state.
//!
//! Owns translating frames to typed messages and back for one connection. It calls the store,
//! the fan-out registry and [`crate::ingest`]; it holds no global state of its own.

pub mod conn;
pub mod session;
pub mod upgrade;
