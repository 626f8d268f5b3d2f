#![no_main]
//! `cargo fuzz run blossom_auth`: see `hearth::fuzz::blossom_auth`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::blossom_auth(data));
