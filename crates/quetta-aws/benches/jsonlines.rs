//! Client CPU for one long JSON line that arrives in small payload parts (a container
//! streaming a 1 MiB `generated_text` in 16-byte parts): every byte is searched for a
//! newline once, so the cost grows with the line, not with its square.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quetta_aws::JsonLines;
use quetta_http::BodyDecoder;

fn line(bytes: usize) -> Vec<u8> {
    let mut l = br#"{"token":{"text":""#.to_vec();
    l.resize(bytes - 4, b'x');
    l.extend_from_slice(b"\"}}\n");
    l
}

fn feed(line: &[u8], part: usize) -> usize {
    let mut d = JsonLines::new("/token/text", false, 2 << 20);
    let mut n = 0;
    for p in line.chunks(part) {
        d.on_data(p, &mut |_| n += 1).unwrap();
    }
    n
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("json_lines");
    g.sample_size(10);
    for size in [64 << 10, 1 << 20] {
        let l = line(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("one {} KiB line in 16-byte parts", size >> 10), |b| {
            b.iter(|| assert_eq!(feed(&l, 16), 1));
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
