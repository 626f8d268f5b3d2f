//! The WebSocket transport: upgrade, the per-connection loop, one file per verb, and
//! per-connection session state.
//!
//! Owns translating frames to typed messages and back for one connection. It asks
//! [`crate::gate`] and reads through [`crate::query`], and the fan-out registry for live events; it holds no
//! global state of its own.

mod action;
mod auth;
pub(crate) mod conn;
mod count;
mod event;
mod handle;
mod neg;
mod negotiate;
mod req;
mod session;
pub(crate) mod upgrade;
