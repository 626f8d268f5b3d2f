#![no_main]
//! `cargo fuzz run strip`: see `hearth::fuzz::strip`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::strip(data));
