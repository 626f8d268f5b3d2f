#![no_main]
//! `cargo fuzz run nip29_action`: see `hearth::fuzz::nip29_action`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::nip29_action(data));
