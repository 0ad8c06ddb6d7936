#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `transfer_frame`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("transfer_frame", data));
