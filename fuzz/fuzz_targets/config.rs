#![no_main]
//! `cargo fuzz run config`: see `hearth::fuzz::config`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::config(data));
