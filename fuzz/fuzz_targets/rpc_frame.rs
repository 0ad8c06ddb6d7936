#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `rpc_frame`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("rpc_frame", data));
