#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `journal_frames`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("journal_frames", data));
