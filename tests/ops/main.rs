//! hearth's admission and operations integration tests: the limiter and the IP ceiling, sockets
//! that try to hold the relay, the `hearth` binary itself (start-up, SIGTERM, `kill -9`),
//! durability, the client library and CLI. See `tests/it` for
//! why there are two binaries.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod backup;
mod binary;
mod client;
mod cluster;
mod datadir;
mod dev;
mod durability;
mod fuzz_corpus;
mod groups;
mod limiter;
mod media;
mod media_s3;
mod nodes;
mod partition;
mod search;
mod sockets;
mod switch;
mod sync;
