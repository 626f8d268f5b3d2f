#![no_main]
//! `cargo fuzz run backup_restore`: see `hearth::fuzz::backup_restore`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth::fuzz::backup_restore(data));
