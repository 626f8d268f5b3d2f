#![no_main]
//! `cargo fuzz run range`: see `hearth::fuzz::range`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::range(data));
