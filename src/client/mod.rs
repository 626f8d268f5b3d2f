//! The client library behind the `hearth` CLI subcommands: a relay session that honours the
//! relay's refusals (a rate-limit gate, exactly one resend, pacing, NIP-42), over WebSocket or
//! over the REST API.
//!
//! The rules live in [`core`] (no I/O, time passed in, unit-tested with a fake clock); the
//! [`session`] moves frames between that core and a WebSocket, and [`rest`] moves the same
//! requests between it and HTTP calls.

pub mod core;
pub mod rest;
pub mod session;

pub use self::core::{Pace, Progress, PublishError, Update};
pub use session::Session;
