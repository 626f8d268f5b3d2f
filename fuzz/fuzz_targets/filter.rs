#![no_main]
//! `cargo fuzz run filter`: see `hearth::fuzz::filter`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::filter(data));
