//! Building requests on several threads ahead of their use.
//!
//! Prompts of an exact token count are encoded and checked with a real tokenizer: about a
//! million tokens a second on one core, so one hour of a 10 req/s workload of 256-token
//! prompts takes ten seconds to build on one thread. A workload whose request for an index
//! depends on that index alone (not on earlier calls) can be built by clones in parallel;
//! [`Prefetched`] does that for the sequence of indices its caller asks for.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver};

use crate::{PlannedRequest, Workload, WorkloadError};

/// How far each worker builds ahead of its caller.
const AHEAD: usize = 32;
/// Built requests kept for indices the caller has skipped (it asked for a later one first).
const KEEP: usize = 4096;

/// A workload whose requests are built by `threads` clones of it on their own threads, for
/// the arithmetic sequence of indices its first two calls set (`i0`, `i1`, `i1 + (i1 − i0)`,
/// …). Requests asked for out of that order are built on the calling thread, so the result
/// is the wrapped workload's exactly, whatever the order. The workers stop when it is
/// dropped.
///
/// The wrapped workload must give the same request for an index whatever was asked before
/// (true of the synthetic workloads, which seed each request from its index).
pub struct Prefetched<W: Workload + Clone + 'static> {
    inner: W,
    threads: usize,
    /// The caller's indices so far (for the sequence's first and step).
    first: Option<u64>,
    run: Option<Run>,
}

/// The workers of one sequence.
struct Run {
    start: u64,
    step: u64,
    /// Worker `k` builds sequence positions `k`, `k + threads`, …; an `Err` is the
    /// workload's end, with the wrapped workload's error if it ended on one.
    rx: Vec<Receiver<Result<PlannedRequest, Option<WorkloadError>>>>,
    /// Positions already taken from the workers.
    taken: u64,
    /// The workers reached the workload's end.
    ended: bool,
    /// The error the workload ended on.
    error: Option<WorkloadError>,
    ready: BTreeMap<u64, PlannedRequest>,
}

impl<W: Workload + Clone + 'static> std::fmt::Debug for Prefetched<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetched").field("threads", &self.threads).finish_non_exhaustive()
    }
}

impl<W: Workload + Clone + 'static> Prefetched<W> {
    /// Wrap `inner`; `threads` of 0 means one per available core, at most 8.
    pub fn new(inner: W, threads: usize) -> Self {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
        } else {
            threads
        };
        Self { inner, threads, first: None, run: None }
    }

    fn start(&self, start: u64, step: u64) -> Option<Run> {
        let n = self.threads as u64;
        let mut rx = Vec::with_capacity(self.threads);
        for k in 0..n {
            let (tx, r) = sync_channel(AHEAD);
            let mut w = self.inner.clone();
            let spawned =
                std::thread::Builder::new().name(format!("quetta-prompts-{k}")).spawn(move || {
                    let mut pos = k;
                    loop {
                        let index = start.saturating_add(pos.saturating_mul(step));
                        let p = w.request(index).ok_or_else(|| w.error());
                        let end = p.is_err();
                        if tx.send(p).is_err() || end {
                            return;
                        }
                        pos += n;
                    }
                });
            // No thread to be had: build on the caller's thread.
            spawned.ok()?;
            rx.push(r);
        }
        Some(Run { start, step, rx, taken: 0, ended: false, error: None, ready: BTreeMap::new() })
    }
}

/// What the workers have for an index.
enum Taken {
    /// The request (`None`: the workload ended before it).
    Built(Option<PlannedRequest>),
    /// Not in the sequence, or passed already: the caller builds it.
    NotHere,
}

impl Run {
    /// The request at `index` if it is in this run's sequence and not passed yet.
    fn take(&mut self, index: u64) -> Taken {
        if let Some(p) = self.ready.remove(&index) {
            return Taken::Built(Some(p));
        }
        if index < self.start || (index - self.start) % self.step != 0 {
            return Taken::NotHere;
        }
        let pos = (index - self.start) / self.step;
        if pos < self.taken || pos - self.taken > KEEP as u64 {
            return Taken::NotHere;
        }
        while self.taken <= pos {
            if self.ended {
                return Taken::Built(None);
            }
            let k = (self.taken % self.rx.len() as u64) as usize;
            let got = self.rx[k].recv().unwrap_or(Err(None));
            let at = self.start + self.taken * self.step;
            self.taken += 1;
            match got {
                Ok(p) if at == index => return Taken::Built(Some(p)),
                Ok(p) => {
                    self.ready.insert(at, p);
                    if self.ready.len() > KEEP {
                        self.ready.pop_first();
                    }
                }
                Err(e) => {
                    self.ended = true;
                    self.error = e;
                }
            }
        }
        Taken::Built(None)
    }
}

impl<W: Workload + Clone + Send + 'static> Workload for Prefetched<W> {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        if let Some(run) = self.run.as_mut() {
            if let Taken::Built(p) = run.take(index) {
                return p;
            }
        } else if self.threads > 1 {
            match self.first {
                None => self.first = Some(index),
                Some(first) if index > first => {
                    self.run = self.start(index, index - first);
                    if let Some(Taken::Built(p)) = self.run.as_mut().map(|r| r.take(index)) {
                        return p;
                    }
                }
                Some(_) => self.first = Some(index),
            }
        }
        self.inner.request(index)
    }

    fn error(&self) -> Option<WorkloadError> {
        self.run.as_ref().and_then(|r| r.error.clone()).or_else(|| self.inner.error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::SyntheticSpec;

    fn spec() -> SyntheticSpec {
        SyntheticSpec { input_len: 40, input_range_ratio: 0.5, ..SyntheticSpec::default() }
    }

    fn same(a: &PlannedRequest, b: &PlannedRequest) {
        assert_eq!(a.index, b.index);
        assert_eq!(a.input_tokens, b.input_tokens);
        assert_eq!(a.max_tokens, b.max_tokens);
        assert_eq!(format!("{:?}", a.prompt), format!("{:?}", b.prompt));
    }

    #[test]
    fn every_order_of_calls_gets_the_wrapped_workloads_requests() {
        let mut plain = spec();
        let orders: [Vec<u64>; 4] = [
            (0..500).collect(),
            (0..300).map(|i| 5 + 3 * i).collect(),
            // out of order locally, a jump back, a jump far ahead
            vec![0, 1, 3, 2, 4, 6, 5, 7, 1, 9000, 8, 9, 10, 10, 11],
            vec![7, 7, 7, 8, 9],
        ];
        for order in orders {
            let mut fetched = Prefetched::new(spec(), 3);
            for i in order {
                same(
                    &fetched.request(i).expect("synthetic never ends"),
                    &plain.request(i).unwrap(),
                );
            }
        }
    }

    #[test]
    fn exact_prompts_built_ahead_are_the_ones_built_in_turn() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/tokenizers/smollm2/tokenizer.json");
        let tok = std::sync::Arc::new(crate::tokenizer::Tokenizer::from_file(&path).unwrap());
        let spec = SyntheticSpec { input_len: 64, input_range_ratio: 0.5, ..spec() };
        let mut plain = crate::synthetic::ExactSynthetic::new(spec.clone(), tok.clone(), false);
        let mut fetched = Prefetched::new(plain.clone(), 2);
        for i in 0..200 {
            let (a, b) = (fetched.request(i).unwrap(), plain.request(i).unwrap());
            same(&a, &b);
            let text = match &a.prompt {
                quetta_engine::Prompt::Chat(m) => m[0].text_content(),
                quetta_engine::Prompt::Text(t) => t.clone(),
                other => panic!("a text prompt, not {other:?}"),
            };
            assert_eq!(tok.count(&text), a.input_tokens as usize);
        }
    }

    /// A workload of `n` requests.
    #[derive(Clone)]
    struct Finite(u64);
    impl Workload for Finite {
        fn request(&mut self, index: u64) -> Option<PlannedRequest> {
            (index < self.0).then(|| {
                let mut p = SyntheticSpec::default().planned(index);
                p.index = index;
                p
            })
        }
    }

    /// A workload whose request `n` cannot be built.
    #[derive(Clone)]
    struct FailsAt(u64, Option<u64>);
    impl Workload for FailsAt {
        fn request(&mut self, index: u64) -> Option<PlannedRequest> {
            if index >= self.0 {
                self.1 = Some(index);
                return None;
            }
            Finite(self.0).request(index)
        }
        fn error(&self) -> Option<WorkloadError> {
            self.1.map(|index| WorkloadError::Request {
                index,
                source: Box::new(WorkloadError::Invalid { name: "prompt", reason: "no".into() }),
            })
        }
    }

    #[test]
    fn a_workload_that_fails_says_why_through_its_builders() {
        for threads in [1, 4] {
            let mut w = Prefetched::new(FailsAt(60, None), threads);
            assert!(w.error().is_none());
            let got = (0..100).map_while(|i| w.request(i)).count();
            assert_eq!(got, 60);
            let e = w.error().expect("the error the workload ended on");
            assert_eq!(e.to_string(), "request 60: invalid prompt: no", "{threads} threads");
        }
        // a workload that simply ends has no error
        let mut w = Prefetched::new(Finite(10), 4);
        assert_eq!((0..20).map_while(|i| w.request(i)).count(), 10);
        assert!(w.error().is_none());
    }

    #[test]
    fn a_finite_workload_ends_where_it_ends() {
        let mut w = Prefetched::new(Finite(100), 4);
        let got: Vec<u64> = (0..150).map_while(|i| w.request(i)).map(|p| p.index).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(w.request(100).is_none());
        // an index before the end, asked again, is still built
        assert_eq!(w.request(99).map(|p| p.index), Some(99));
    }
}
