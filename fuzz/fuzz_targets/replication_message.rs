#![no_main]
//! libFuzzer entry for `crescent_fuzz_targets` target `replication_message`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crescent_fuzz_targets::run("replication_message", data));
