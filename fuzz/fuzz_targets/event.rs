#![no_main]
//! `cargo fuzz run event`: see `hearth::fuzz::event`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::event(data));
