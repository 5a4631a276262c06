//! An engine written here (not one of Quetta's adapters) benchmarked with `quetta::Benchmark`,
//! then swept at three concurrencies. Run it: `cargo run -p quetta-embed-example`.

use std::sync::Arc;
use std::time::Duration;

use quetta::engine::stream::events;
use quetta::engine::{Delta, Engine, EngineRequest, EventKind, EventStream, Usage};
use quetta::{Benchmark, Load, Sweep, Target, WorkloadSpec};

/// A model that thinks `ttft` and then says one word every `itl`; it runs `slots` requests
/// at once, so its TTFT grows with the load, as a real server's does.
struct Toy {
    ttft: Duration,
    itl: Duration,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Engine for Toy {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn send(&self, req: EngineRequest) -> EventStream {
        let (ttft, itl, slots) = (self.ttft, self.itl, self.slots.clone());
        let n = req.max_tokens.unwrap_or(16);
        events(move |mut tx| async move {
            let _slot = slots.acquire_owned().await;
            tx.headers(200);
            tokio::time::sleep(ttft).await;
            for _ in 0..n {
                tx.send(EventKind::Content(Delta::of("word", req.capture_text)));
                tokio::time::sleep(itl).await;
            }
            tx.send(EventKind::Usage(Usage::tokens(None, Some(u64::from(n)))));
            tx.end(Some("length"));
        })
    }
}

fn main() -> quetta::Result<()> {
    let toy = Toy {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(2),
        slots: Arc::new(tokio::sync::Semaphore::new(4)),
    };
    let base = Benchmark::new(Target::engine(Arc::new(toy)))
        .workload(WorkloadSpec::synthetic(64, 16))
        .requests(40);

    let one = base.clone().load(Load::closed(2)).run_blocking()?;
    let m = &one.summary; // its fields as in summary.json
    println!(
        "{} requests, TTFT p50 {:?} ms, p99 {:?} ms",
        m.completed, m.ttft_ms.p50, m.ttft_ms.p99
    );

    let sweep = Sweep::concurrencies(base, vec![1, 4, 16]).run_blocking()?;
    println!("{:>11} {:>10} {:>10} {:>8}", "concurrency", "TTFT p50", "TTFT p99", "req/s");
    for s in &sweep.steps {
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        println!(
            "{:>11} {:>10} {:>10} {:>8.1}",
            s.value(),
            ms(s.ttft_p50_ms),
            ms(s.ttft_p99_ms),
            s.request_throughput
        );
    }
    Ok(())
}
