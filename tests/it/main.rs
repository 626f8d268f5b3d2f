//! hearth's protocol and HTTP integration tests: NIP-01 over WebSocket, the REST and admin APIs,
//! NIP-11 and metrics, and the shared test vectors, against real relays started in-process
//! (`common::TestRelay`) over real sockets.
//!
//! The integration tests are two binaries, this one and `tests/ops`: each links once (a binary
//! per file linked a dozen times), and the two compile side by side on two cores (one binary
//! compiled on one core for most of its build).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;

mod access;
mod admin;
mod clients;
mod groups;
mod hostile;
mod hostile_media;
mod http;
mod media;
mod media_privacy;
mod membership;
mod nip01;
mod private;
mod reports;
mod rest;
mod search;
mod sync;
mod testing;
mod vanish;
mod vectors;
