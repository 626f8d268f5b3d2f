#![no_main]
//! `cargo fuzz run record`: see `hearth::fuzz::record`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::record(data));
