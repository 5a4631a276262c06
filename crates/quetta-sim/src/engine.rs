//! An iteration-level continuous-batching engine: the scheduler of vLLM- and llama.cpp-class
//! servers, on a clock it is given (nanoseconds), so the same code serves the live twin (the
//! real clock) and predictions (a virtual one).
//!
//! Each step: admit waiting requests first come, first served while the running ones are
//! fewer than `max_seqs` and the KV cache has room for the prompt; give every decoding
//! sequence one token of the step's budget (`max_batch_tokens`), and the rest to prompts in
//! admission order (chunked prefill); a decoding sequence that finds no free KV preempts the
//! newest running sequence, which goes back to the head of the queue and is recomputed. The
//! step takes [`StepTime::ms`]; at its end each decoding sequence and each sequence whose
//! prompt is complete has one more token.

use std::collections::VecDeque;

use crate::model::{ServerModel, StepTime};

/// One request, as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineRequest {
    pub id: u64,
    /// When the scheduler can first see it (ns).
    pub at_ns: u64,
    pub prompt_tokens: u32,
    /// Prompt tokens found in the prefix cache (not computed).
    pub cached_tokens: u32,
    pub output_tokens: u32,
}

/// What happened at the end of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub id: u64,
    pub at_ns: u64,
    /// 0-based index of the token in the output.
    pub index: u32,
    /// The request's last token.
    pub last: bool,
}

#[derive(Debug, Clone)]
struct Seq {
    req: EngineRequest,
    /// Tokens that must be in the KV cache before the next token: the prompt, plus the
    /// tokens generated before a preemption.
    prefill_target: u32,
    /// Tokens of `prefill_target` computed (or cached) so far.
    computed: u32,
    generated: u32,
    /// Cached tokens still to be counted by the first prefill step.
    cached_pending: u32,
}

impl Seq {
    /// KV tokens held: the whole prefill target is reserved at admission, then one per
    /// token generated since.
    fn kv(&self) -> u64 {
        u64::from(self.prefill_target)
            + u64::from(self.generated.saturating_sub(self.generated_in_prefill()))
    }
    /// Generated tokens that are part of `prefill_target` (after a preemption).
    fn generated_in_prefill(&self) -> u32 {
        self.prefill_target - self.req.prompt_tokens
    }
    fn decoding(&self) -> bool {
        self.computed >= self.prefill_target
    }
}

/// Counters of an engine's life, for the twin's own report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub steps: u64,
    pub preemptions: u64,
    /// The most sequences that ran in one step.
    pub peak_running: u32,
    /// The most requests that waited at once.
    pub peak_waiting: u32,
}

/// The engine. Feed it with [`Engine::submit`]; drive it with [`Engine::begin_step`] and
/// [`Engine::end_step`].
#[derive(Debug)]
pub struct Engine {
    step: StepTime,
    max_seqs: usize,
    kv_tokens: u64,
    budget: u32,
    /// Prompt tokens every request finds cached (the server's template prefix).
    template_cached: u32,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    /// Per running sequence: (prompt tokens computed, emits a token) in the current step.
    plan: Vec<(u32, bool)>,
    step_end: Option<u64>,
    /// When the engine last went idle (its last step's end; 0 before any step).
    idle_since: u64,
    /// The model's gather window (ns).
    gather_ns: u64,
    stats: EngineStats,
}

impl Engine {
    pub fn new(m: &ServerModel) -> Self {
        Self {
            step: m.step.clone(),
            max_seqs: m.max_seqs.max(1) as usize,
            kv_tokens: m.kv_tokens.max(1),
            budget: m.max_batch_tokens.max(1),
            template_cached: m.template_cached_tokens,
            waiting: VecDeque::new(),
            running: Vec::new(),
            plan: Vec::new(),
            step_end: None,
            idle_since: 0,
            gather_ns: (m.gather_ms * 1e6).round().max(0.0) as u64,
            stats: EngineStats::default(),
        }
    }

    /// A request the scheduler will consider from the next step on. Its cached tokens are at
    /// least the model's template prefix, and never its whole prompt.
    pub fn submit(&mut self, req: EngineRequest) {
        let cached =
            req.cached_tokens.max(self.template_cached).min(req.prompt_tokens.saturating_sub(1));
        let req =
            EngineRequest { cached_tokens: cached, output_tokens: req.output_tokens.max(1), ..req };
        self.waiting.push_back(Seq {
            req,
            prefill_target: req.prompt_tokens.max(1),
            computed: 0,
            generated: 0,
            cached_pending: cached,
        });
        self.stats.peak_waiting = self.stats.peak_waiting.max(self.waiting.len() as u32);
    }

    /// Drop request `id` (its client went away, as a server aborts a request whose
    /// connection closed): it leaves the queue or the batch and frees its KV. Between
    /// steps only. Whether it was there.
    pub fn abort(&mut self, id: u64) -> bool {
        debug_assert!(self.step_end.is_none(), "abort between steps");
        let before = self.waiting.len() + self.running.len();
        self.waiting.retain(|s| s.req.id != id);
        self.running.retain(|s| s.req.id != id);
        self.waiting.len() + self.running.len() < before
    }

    /// When to begin the next step, given the earliest request that has reached the
    /// scheduler by now (`first_ns`): a request that finds the engine idle opens the model's
    /// gather window, and those arriving within it share the first step; one that arrived
    /// while a step ran joins the next at once.
    pub fn step_start(&self, first_ns: u64) -> u64 {
        if self.is_idle() && first_ns >= self.idle_since {
            first_ns + self.gather_ns
        } else {
            first_ns
        }
    }

    /// Nothing running and nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    fn kv_used(&self) -> u64 {
        self.running.iter().map(Seq::kv).sum()
    }

    /// Start a step at `now_ns`; its end, or `None` when there is nothing to run.
    pub fn begin_step(&mut self, now_ns: u64) -> Option<u64> {
        debug_assert!(self.step_end.is_none(), "a step is already running");
        self.admit();
        self.make_room();
        if self.running.is_empty() {
            return None;
        }
        let mut left = self.budget;
        let (mut prefill, mut cached, mut decode, mut context) = (0u64, 0u64, 0u64, 0u64);
        let mut pairs = 0.0;
        self.plan.clear();
        for s in &self.running {
            if s.decoding() && left > 0 {
                left -= 1;
                decode += 1;
                context += s.kv();
                self.plan.push((0, true));
            } else {
                self.plan.push((0, false));
            }
        }
        for (s, p) in self.running.iter_mut().zip(self.plan.iter_mut()) {
            if s.decoding() || left == 0 {
                continue;
            }
            if s.cached_pending > 0 {
                cached += u64::from(s.cached_pending);
                s.computed += s.cached_pending;
                s.cached_pending = 0;
            }
            let n = (s.prefill_target - s.computed).min(left);
            left -= n;
            prefill += u64::from(n);
            pairs += f64::from(n) * (f64::from(s.computed) + f64::from(n) / 2.0);
            *p = (n, s.computed + n >= s.prefill_target);
        }
        let ms = self.step.ms(prefill, pairs, cached, decode, context);
        let end = now_ns + (ms * 1e6).round().max(1.0) as u64;
        self.step_end = Some(end);
        self.stats.steps += 1;
        self.stats.peak_running = self.stats.peak_running.max(self.running.len() as u32);
        Some(end)
    }

    /// End the running step: the tokens it made, in `out`; finished sequences leave.
    pub fn end_step(&mut self, out: &mut Vec<Token>) {
        let Some(at_ns) = self.step_end.take() else { return };
        for (s, &(n, emits)) in self.running.iter_mut().zip(&self.plan) {
            s.computed += n;
            if emits {
                let index = s.generated;
                s.generated += 1;
                let last = s.generated >= s.req.output_tokens;
                out.push(Token { id: s.req.id, at_ns, index, last });
            }
        }
        self.running.retain(|s| s.generated < s.req.output_tokens);
        self.plan.clear();
        if self.is_idle() {
            self.idle_since = at_ns;
        }
    }

    /// FCFS admission within the sequence limit and the free KV.
    fn admit(&mut self) {
        while self.running.len() < self.max_seqs {
            let Some(next) = self.waiting.front() else { break };
            let need = u64::from(next.prefill_target);
            let used = self.kv_used();
            // A request larger than the whole cache runs alone rather than never.
            if used + need > self.kv_tokens && !self.running.is_empty() {
                break;
            }
            let s = self.waiting.pop_front().expect("front exists");
            self.running.push(s);
        }
    }

    /// Decoding sequences each need one more KV slot this step: preempt the newest running
    /// sequences (recompute) until they fit.
    fn make_room(&mut self) {
        loop {
            let need = self.running.iter().filter(|s| s.decoding()).count() as u64;
            if self.kv_used() + need <= self.kv_tokens || self.running.len() <= 1 {
                return;
            }
            let mut s = self.running.pop().expect("more than one running");
            s.prefill_target = s.req.prompt_tokens.max(1) + s.generated;
            s.computed = 0;
            s.cached_pending = 0;
            self.stats.preemptions += 1;
            self.waiting.push_front(s);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{FitQuality, Fits, SERVER_MODEL_VERSION};

    pub(crate) fn model(max_seqs: u32, kv: u64) -> ServerModel {
        let q = FitQuality { points: 0, r2: 1.0, rmse_ms: 0.0, max_rel_residual: 0.0 };
        ServerModel {
            schema_version: SERVER_MODEL_VERSION,
            server: "test".into(),
            model: "test".into(),
            calibrated_unix_s: 0,
            step: StepTime {
                base_ms: 10.0,
                prefill_token_ms: 0.1,
                prefill_pair_mt_ms: 0.0,
                cached_token_ms: 0.0,
                decode_seq_ms: 1.0,
                context_kt_ms: 0.0,
                context_knee_tokens: 0,
                context_over_kt_ms: 0.0,
                multi_seq_ms: 0.0,
                decode_by_seqs: Vec::new(),
                prefill_step_ms: 0.0,
            },
            max_seqs,
            kv_tokens: kv,
            max_batch_tokens: 512,
            prefix_cache: false,
            block_tokens: 16,
            prompt_extra_tokens: 0,
            template_cached_tokens: 0,
            arrival_overhead_ms: 0.0,
            emit_overhead_ms: 0.0,
            gather_ms: 0.0,
            fits: Fits {
                prefill: q.clone(),
                decode: q,
                max_seqs_observed: max_seqs,
                max_seqs_probe: 0,
            },
            decode_probe_tokens: None,
            rechecked: None,
        }
    }

    fn run(e: &mut Engine, reqs: &[EngineRequest]) -> Vec<Token> {
        let mut pending: VecDeque<_> = reqs.iter().copied().collect();
        let (mut now, mut out) = (0u64, Vec::new());
        loop {
            if let Some(r) = pending.front().filter(|r| r.at_ns <= now) {
                now = now.max(e.step_start(r.at_ns));
            }
            while pending.front().is_some_and(|r| r.at_ns <= now) {
                e.submit(pending.pop_front().expect("front"));
            }
            match e.begin_step(now) {
                Some(end) => {
                    e.end_step(&mut out);
                    now = end;
                }
                None => match pending.front() {
                    Some(r) => now = r.at_ns,
                    None => return out,
                },
            }
        }
    }

    fn req(id: u64, at_ms: u64, prompt: u32, out: u32) -> EngineRequest {
        EngineRequest {
            id,
            at_ns: at_ms * 1_000_000,
            prompt_tokens: prompt,
            cached_tokens: 0,
            output_tokens: out,
        }
    }

    #[test]
    fn one_request_is_a_prefill_step_then_decode_steps() {
        let mut e = Engine::new(&model(4, 100_000));
        let t = run(&mut e, &[req(1, 0, 100, 3)]);
        // prefill: 10 + 0.1·100 = 20 ms gives token 0; decode steps 10 + 1 = 11 ms each
        let at: Vec<u64> = t.iter().map(|t| t.at_ns / 1_000_000).collect();
        assert_eq!(at, vec![20, 31, 42]);
        assert!(t[2].last && !t[1].last);
    }

    #[test]
    fn an_aborted_request_leaves_its_slot_to_the_next() {
        let mut e = Engine::new(&model(1, 100_000));
        e.submit(req(1, 0, 100, 1_000));
        e.submit(req(2, 0, 100, 2));
        let mut out = Vec::new();
        e.begin_step(0).expect("a step");
        e.end_step(&mut out);
        assert_eq!(out.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1]);
        assert!(e.abort(1), "request 1 was running");
        assert!(!e.abort(1), "and is gone");
        // request 2 takes the one slot at once: prefill 20 ms, then one decode step
        let t = run(&mut e, &[]);
        assert_eq!(t.iter().map(|t| (t.id, t.index)).collect::<Vec<_>>(), vec![(2, 0), (2, 1)]);
        assert!(e.is_idle());
    }

    #[test]
    fn the_batch_limit_queues_and_a_prefill_stalls_the_decoders() {
        let mut e = Engine::new(&model(1, 100_000));
        let t = run(&mut e, &[req(1, 0, 100, 2), req(2, 0, 100, 2)]);
        let of =
            |id| t.iter().filter(|t| t.id == id).map(|t| t.at_ns / 1_000_000).collect::<Vec<_>>();
        assert_eq!(of(1), vec![20, 31]);
        assert_eq!(of(2), vec![51, 62], "the second waits for the first to end");
        let mut e = Engine::new(&model(2, 100_000));
        let t = run(&mut e, &[req(1, 0, 100, 3), req(2, 15, 100, 2)]);
        let of =
            |id| t.iter().filter(|t| t.id == id).map(|t| t.at_ns / 1_000_000).collect::<Vec<_>>();
        // request 2 joins at 20 ms: one step of 10 + 0.1·100 + 1 = 21 ms for both
        assert_eq!(of(1), vec![20, 41, 53]);
        assert_eq!(of(2), vec![41, 53]);
    }

    #[test]
    fn a_full_kv_cache_preempts_the_newest_and_recomputes_it() {
        let mut e = Engine::new(&model(4, 230));
        let t = run(&mut e, &[req(1, 0, 100, 20), req(2, 0, 100, 20)]);
        assert!(e.stats().preemptions >= 1);
        for id in [1, 2] {
            let idx: Vec<u32> = t.iter().filter(|t| t.id == id).map(|t| t.index).collect();
            assert_eq!(idx, (0..20).collect::<Vec<_>>(), "each token once, in order");
        }
    }

    #[test]
    fn cached_tokens_are_not_computed() {
        let mut e = Engine::new(&model(4, 100_000));
        let mut r = req(1, 0, 1000, 1);
        r.cached_tokens = 900;
        let t = run(&mut e, &[r]);
        assert_eq!(t[0].at_ns / 1_000_000, 20, "10 + 0.1·100");
    }

    #[test]
    fn requests_that_reach_an_idle_engine_together_share_its_first_step() {
        let reqs = [req(1, 0, 100, 1), req(2, 3, 100, 1), req(3, 8, 100, 1)];
        let at = |t: &[Token]| t.iter().map(|t| (t.id, t.at_ns / 1_000_000)).collect::<Vec<_>>();
        // no window: 1 alone (10 + 10 ms), then 2 and 3 together (10 + 20 ms)
        let t = run(&mut Engine::new(&model(4, 100_000)), &reqs);
        assert_eq!(at(&t), vec![(1, 20), (2, 50), (3, 50)]);
        // a 5 ms window: 1 and 2 start together at 5 ms (10 + 20 ms); 3 came during that
        // step, which was busy, and starts the next at once at its end (10 + 10 ms)
        let mut m = model(4, 100_000);
        m.gather_ms = 5.0;
        let mut e = Engine::new(&m);
        let t = run(&mut e, &reqs);
        assert_eq!(at(&t), vec![(1, 35), (2, 35), (3, 55)]);
        // idle again: the next arrival opens a window of its own
        assert_eq!(e.step_start(100_000_000), 105_000_000);
    }

    #[test]
    fn context_beyond_the_knee_costs_more() {
        let mut m = model(4, 100_000);
        m.step.context_kt_ms = 1.0;
        m.step.context_knee_tokens = 1_000;
        m.step.context_over_kt_ms = 4.0;
        let mut e = Engine::new(&m);
        let t = run(&mut e, &[req(1, 0, 1500, 3)]);
        let gaps: Vec<u64> = t.windows(2).map(|w| w[1].at_ns - w[0].at_ns).collect();
        // B 1, C 1,501 then 1,502: 10 + 1 + 1.501 + 4·0.501 ms, then 0.005 ms more
        assert_eq!(gaps, vec![14_505_000, 14_510_000], "{t:?}");
        assert!((m.step.ms(0, 0.0, 0, 2, 900) - 12.9).abs() < 1e-9, "below the knee: linear");
    }

    #[test]
    fn chunked_prefill_spreads_a_long_prompt() {
        let mut e = Engine::new(&model(4, 100_000));
        let t = run(&mut e, &[req(1, 0, 1200, 1)]);
        // 512 + 512 + 176 tokens: 61.2 + 61.2 + 27.6 ms
        assert_eq!(t[0].at_ns / 100_000, 1500);
    }
}
