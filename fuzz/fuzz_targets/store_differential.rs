#![no_main]
//! `cargo fuzz run store_differential`: see `hearth::fuzz::store_differential`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::store_differential(data));
