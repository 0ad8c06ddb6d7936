#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `snapshot_file`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("snapshot_file", data));
