#![no_main]
//! `cargo fuzz run store_files`: see `hearth::fuzz::store_files`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::store_files(data));
