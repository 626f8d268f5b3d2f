//! hearth's integration tests, one binary: each module starts real relays (in-process through
//! `common::TestRelay`, or the `hearth` binary itself) and talks to them over real sockets.
//! One binary instead of one per file: linking is most of `cargo test` on two cores.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

mod common;

mod admin;
mod admission;
mod bench_smoke;
mod binary;
mod client;
mod durability;
mod http;
mod limiter;
mod nip01;
mod rest;
mod sockets;
mod vectors;
