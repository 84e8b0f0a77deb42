#![no_main]
use libfuzzer_sys::fuzz_target;
use profiler::wire::Protocol;

fuzz_target!(|data: &[u8]| {
    profiler::check(&profiler::chunks(Protocol::Http, data));
});
