//! The SSE parser and chunk decoder on arbitrary bytes split at arbitrary points: no panic,
//! bounded memory, and the same events however the bytes are split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quetta_openai::decode::ChunkDecoder;
use quetta_http::sse::SseParser;

fn decode(frames: &[&[u8]]) -> Vec<String> {
    let mut p = SseParser::new(4096);
    let mut d = ChunkDecoder::new(true);
    let mut out = Vec::new();
    let mut failed = false;
    for f in frames {
        let r = p.feed(f, |et, data| {
            if failed || d.done {
                return;
            }
            if let Err(e) = d.on_event(et, data, &mut |k| out.push(format!("{k:?}"))) {
                out.push(format!("error {}", e.kind()));
                failed = true;
            }
        });
        if r.is_err() {
            out.push("too large".into());
            return out;
        }
    }
    let _ = p.finish(|et, data| {
        if !failed && !d.done {
            let _ = d.on_event(et, data, &mut |k| out.push(format!("{k:?}")));
        }
    });
    out
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // the first byte chooses a split stride
    let stride = usize::from(data[0] % 17) + 1;
    let body = &data[1..];
    let whole = decode(&[body]);
    let frames: Vec<&[u8]> = body.chunks(stride).collect();
    let split = decode(&frames);
    // an oversized event may be detected at a different point; otherwise identical
    if !whole.iter().any(|e| e == "too large") && !split.iter().any(|e| e == "too large") {
        assert_eq!(whole, split);
    }
});
