#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `api_body`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("api_body", data));
