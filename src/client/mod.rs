//! The client library behind the `hearth` CLI subcommands: a relay session that honours the
//! relay's refusals (a rate-limit gate, exactly one resend, pacing, NIP-42), over WebSocket or
//! over the REST API.
//!
//! The rules live in [`core`] (no I/O, time passed in, unit-tested with a fake clock); the
//! [`session`] is the caller's handle and what both transports share, [`ws`] moves frames
//! between the core and a WebSocket, and [`rest`] moves the same requests between it and HTTP
//! calls; neither transport imports the other.

pub mod core;
pub mod nip11;
pub mod rest;
pub mod session;
pub mod ws;

pub use self::core::{Pace, Progress, PublishError, Update};
pub use session::Session;
