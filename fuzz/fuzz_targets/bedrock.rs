#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| quetta_fuzz::bedrock(data));
