#![no_main]
//! `cargo fuzz run client_message`: see `hearth::fuzz::client_message`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::client_message(data));
