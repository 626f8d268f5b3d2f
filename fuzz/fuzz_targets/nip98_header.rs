#![no_main]
//! `cargo fuzz run nip98_header`: see `hearth::fuzz::nip98_header`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::nip98_header(data));
