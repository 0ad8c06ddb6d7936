#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `safetensors_header`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("safetensors_header", data));
