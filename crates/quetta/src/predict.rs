//! Predicted runs: a benchmark's own schedule and workload through the twin's engine on a
//! virtual clock. The result is a normal run directory (records, series, summary), made by
//! the code every run uses, with each request timed as the engine says: sent at its
//! intended time (open loop) or when its slot's previous request ended (closed loop), seen
//! by the scheduler `arrival_overhead_ms` later, each token at its step's end plus
//! `emit_overhead_ms`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use quetta_engine::setting::Setting;
use quetta_engine::{Prompt, Usage};
use quetta_loadgen::{Dispatch, RunOutcome};
use quetta_metrics::{Aggregate, Observation, RequestRecord};
use quetta_sim::cache::{body_tokens, TwinCache};
use quetta_sim::engine::{Engine, EngineRequest, Token};
use quetta_sim::model::ServerModel;
use quetta_workload::spec::BuiltWork;
use quetta_workload::{Workload, WorkloadError};

use quetta_report::Note;

use crate::{BenchReport, Benchmark, Error, Result, RunDir};

/// One request of a prediction while it runs.
struct Flight {
    index: u64,
    intended_ns: u64,
    sent_ns: u64,
    input: u32,
    /// Prompt tokens the twin's prefix cache served.
    cached: Option<u32>,
    output: u32,
    tokens: Vec<u64>,
}

/// How sends are made.
enum Pace {
    /// At these offsets (ns), at most `cap` in flight.
    Open { offsets: VecDeque<u64>, cap: usize },
    /// `concurrency` slots; stop after `count` requests or past `deadline_ns`.
    Closed { concurrency: usize, count: Option<u64>, deadline_ns: Option<u64> },
}

struct Sim<'a> {
    engine: Engine,
    model: &'a ServerModel,
    /// The live twin's prefix cache, fed each prompt when it is sent.
    cache: TwinCache,
    work: &'a mut dyn Workload,
    next_index: u64,
    exhausted: bool,
    /// The error the workload ended on, if it did.
    error: Option<WorkloadError>,
    flights: std::collections::HashMap<u64, Flight>,
    /// Closed loop: slot free times; open loop: requests due but capped.
    ready: BinaryHeap<Reverse<(u64, u64)>>,
    /// (at_ns, id) of requests the scheduler has not seen yet.
    arriving: BinaryHeap<Reverse<(u64, u64)>>,
    done: Vec<Observation>,
    sent: u64,
    /// Open loop: the next send waits for the cap.
    cap_waiting: bool,
}

/// The time a client takes to issue one request after another (closed loop's first sends).
const SEND_SPACING_NS: u64 = 50_000;

fn ns(ms: f64) -> u64 {
    (ms * 1e6).round().max(0.0) as u64
}

impl Sim<'_> {
    /// Send the next workload request at `at_ns` (intended at `intended_ns`).
    fn send(&mut self, intended_ns: u64, at_ns: u64) -> bool {
        if self.exhausted {
            return false;
        }
        let Some(p) = self.work.request(self.next_index) else {
            self.exhausted = true;
            self.error = self.work.error();
            return false;
        };
        let id = self.next_index;
        self.next_index += 1;
        self.sent += 1;
        let input = p.input_tokens.saturating_add(self.model.prompt_extra_tokens).max(1);
        let cached = self.cache.enabled().then(|| {
            let c = self.cache.serve(&cache_tokens(&p.prompt), u64::from(input));
            u32::try_from(c).unwrap_or(u32::MAX)
        });
        self.flights.insert(
            id,
            Flight {
                index: p.index,
                intended_ns,
                sent_ns: at_ns,
                input,
                cached,
                output: p.max_tokens.max(1),
                tokens: Vec::new(),
            },
        );
        self.arriving.push(Reverse((at_ns + ns(self.model.arrival_overhead_ms), id)));
        true
    }

    fn admit_until(&mut self, now: u64) {
        while let Some(&Reverse((at, id))) = self.arriving.peek() {
            if at > now {
                break;
            }
            self.arriving.pop();
            let f = &self.flights[&id];
            self.engine.submit(EngineRequest {
                id,
                at_ns: at,
                prompt_tokens: f.input,
                cached_tokens: f.cached.unwrap_or(0),
                output_tokens: f.output,
            });
        }
    }

    /// Tokens of a step: finished requests become observations; their ends, in `ended`.
    fn take(&mut self, tokens: &[Token], stream: bool, ended: &mut Vec<u64>) {
        let emit = ns(self.model.emit_overhead_ms);
        for t in tokens {
            let Some(f) = self.flights.get_mut(&t.id) else { continue };
            f.tokens.push(t.at_ns + emit);
            if t.last {
                let f = self.flights.remove(&t.id).expect("present");
                ended.push(*f.tokens.last().expect("a token"));
                self.done.push(observe(f, stream));
            }
        }
    }
}

/// A prompt's prefix-cache tokens, made by the live twin's own code from the body the
/// prompt is sent as (its messages, text or token ids).
fn cache_tokens(p: &Prompt) -> Vec<u64> {
    let body = match p {
        Prompt::Chat(msgs) => serde_json::json!({ "messages": msgs }),
        Prompt::Text(t) => serde_json::json!({ "prompt": t }),
        Prompt::TokenIds(ids) => serde_json::json!({ "prompt": ids }),
        // a prompt of another kind: no cache hits (an upper bound on its prefill)
        _ => return Vec::new(),
    };
    body_tokens(&body, u64::from(quetta_sim::SimConfig::default().image_tokens))
}

fn observe(f: Flight, stream: bool) -> Observation {
    let d = Duration::from_nanos;
    let last = *f.tokens.last().expect("a token");
    let first = if stream { f.tokens[0] } else { last };
    let itl_us = if stream {
        f.tokens
            .windows(2)
            .map(|w| u32::try_from((w[1] - w[0]) / 1_000).unwrap_or(u32::MAX))
            .collect()
    } else {
        Vec::new()
    };
    Observation {
        id: f.index,
        intended: d(f.intended_ns),
        started: d(f.intended_ns),
        sent: Some(d(f.sent_ns)),
        headers: Some(d(first)),
        first_byte: Some(d(first)),
        first_token: Some(d(first)),
        first_output: Some(d(first)),
        end: d(last),
        itl_us,
        token_chunks: if stream { f.tokens.len() as u32 } else { 1 },
        usage: Some(
            Usage::tokens(Some(u64::from(f.input)), Some(f.tokens.len() as u64))
                .with_cached(f.cached.map(u64::from)),
        ),
        planned_input_tokens: f.input,
        planned_output_tokens: f.output,
        status: Some(200),
        finish_reason: Some("length".into()),
        streamed: stream,
        attempts: 1,
        ..Observation::default()
    }
}

/// What a simulation gave.
struct Simulated {
    /// The observations, in completion order.
    obs: Vec<Observation>,
    /// The workload ran out before the load asked for its last request.
    exhausted: bool,
    /// The error it ended on, if it did.
    error: Option<WorkloadError>,
}

/// Run the engine over the paced workload.
fn simulate(
    model: &ServerModel,
    work: &mut dyn Workload,
    mut pace: Pace,
    stream: bool,
) -> Simulated {
    let mut s = Sim {
        engine: Engine::new(model),
        model,
        cache: TwinCache::new(model),
        work,
        next_index: 0,
        exhausted: false,
        error: None,
        flights: Default::default(),
        ready: BinaryHeap::new(),
        arriving: BinaryHeap::new(),
        done: Vec::new(),
        sent: 0,
        cap_waiting: false,
    };
    let mut now = 0u64;
    if let Pace::Closed { concurrency, .. } = &pace {
        // A client sends "at once" one request after another, not at one instant: the
        // server's loop, idle, starts its first step on the first to arrive (after the
        // model's gather window, which the others may reach), as with the live twin.
        for k in 0..*concurrency as u64 {
            s.ready.push(Reverse((k * SEND_SPACING_NS, 0)));
        }
    }
    let (mut out, mut ended) = (Vec::new(), Vec::new());
    loop {
        release(&mut s, &mut pace, now);
        // a request that finds the engine idle opens its gather window: sends and arrivals
        // within it share the first step
        let first = s.arriving.peek().map(|Reverse((at, _))| *at).filter(|&a| a <= now);
        if let Some(start) = first.map(|a| s.engine.step_start(a)).filter(|&t| t > now) {
            now = start;
            release(&mut s, &mut pace, now);
        }
        s.admit_until(now);
        if let Some(end) = s.engine.begin_step(now) {
            out.clear();
            s.engine.end_step(&mut out);
            ended.clear();
            s.take(&out, stream, &mut ended);
            // sends due during the step go out at their own times, seen from its end on
            if let Pace::Closed { .. } = &pace {
                for &e in &ended {
                    s.ready.push(Reverse((e, 0)));
                }
            }
            release(&mut s, &mut pace, end);
            now = end;
            continue;
        }
        // idle: the next arrival, or nothing more to do
        let next_arrival = s.arriving.peek().map(|Reverse((at, _))| *at);
        let next_send = match &pace {
            Pace::Open { offsets, .. } => offsets.front().copied(),
            Pace::Closed { .. } => None,
        };
        match next_arrival.into_iter().chain(next_send).min() {
            Some(t) => now = t.max(now),
            None => return Simulated { obs: s.done, exhausted: s.exhausted, error: s.error },
        }
    }
}

/// Make the sends that are due at `now`.
fn release(s: &mut Sim<'_>, pace: &mut Pace, now: u64) {
    match pace {
        Pace::Closed { count, deadline_ns, .. } => {
            while let Some(&Reverse((free, _))) = s.ready.peek() {
                if free > now {
                    break;
                }
                s.ready.pop();
                let over =
                    count.is_some_and(|c| s.sent >= c) || deadline_ns.is_some_and(|d| free >= d);
                if !over {
                    s.send(free, free);
                }
            }
        }
        Pace::Open { offsets, cap } => {
            while let Some(&o) = offsets.front() {
                if o > now {
                    s.cap_waiting = false;
                    break;
                }
                if s.flights.len() >= *cap {
                    // sent when a request ends (at a step's end)
                    s.cap_waiting = true;
                    break;
                }
                offsets.pop_front();
                let at = if s.cap_waiting { now } else { o };
                s.send(o, at);
            }
        }
    }
}

impl Benchmark {
    /// Predict this benchmark against `model`'s twin on a virtual clock: the schedule and
    /// workload this benchmark would send, through the iteration-level engine, written as
    /// a run (records, series, summary, into [`Benchmark::output_dir`] when set). An hour
    /// of load takes seconds. Multi-turn sessions are refused; warmup requests are not
    /// predicted (the twin has no cold start); every request generates its planned
    /// `max_tokens`.
    pub fn predict_blocking(self, model: &ServerModel) -> Result<BenchReport> {
        crate::runtime(Some(1))?.block_on(self.predict(model))
    }

    /// [`Benchmark::predict_blocking`] on the caller's runtime.
    pub async fn predict(self, model: &ServerModel) -> Result<BenchReport> {
        model.check().map_err(|(f, m)| {
            Error::invalid(Setting::ServerModel, format!("the server model's {f}: {m}"))
        })?;
        let kind = self.target.request_kind();
        if kind != quetta_engine::RequestKind::Generate {
            return Err(Error::conflict(
                Setting::ServerModel,
                Setting::Endpoint,
                format!(
                    "a twin predicts text generation; the {} protocol's requests ({}) are not predicted",
                    self.target.protocol,
                    kind.as_str()
                ),
            ));
        }
        let p = self.prepare().await?;
        let crate::bench::Prepared { built, cfg, sessions, load, mut notes } = p;
        if sessions.is_some() {
            return Err(Error::conflict(
                Setting::ServerModel,
                Setting::Sessions,
                "predict runs request workloads; multi-turn sessions are not predicted",
            ));
        }
        let offsets = cfg.intended_offsets()?;
        let pace = match (&cfg.dispatch, offsets) {
            (Dispatch::Closed { concurrency }, _) => Pace::Closed {
                concurrency: (*concurrency).max(1),
                count: cfg.num_requests,
                deadline_ns: cfg.duration.map(|d| d.as_nanos() as u64),
            },
            (l, o) => Pace::Open {
                offsets: o.unwrap_or_default().iter().map(|d| d.as_nanos() as u64).collect(),
                cap: l.max_concurrency().unwrap_or(usize::MAX),
            },
        };
        let settings = crate::summary::predicted_settings(&self, &built, &load, &cfg, model);
        let BuiltWork::Requests(mut work) = built.into_work() else {
            return Err(Error::Internal("a request workload built another kind of work"));
        };
        if cfg.warmup > 0 {
            notes.push(Note::WarmupNotPredicted(cfg.warmup));
        }
        notes.push(Note::PredictedByTwin {
            server: model.server.clone(),
            model: model.model.clone(),
            recheck: model.rechecked.map(|r| [r.prefill_factor, r.decode_factor, r.context()]),
        });
        let started = Instant::now();
        let sim = simulate(model, &mut *work, pace, cfg.stream);
        let wall = started.elapsed();
        let dir = match &self.output_dir {
            Some(d) => Some(RunDir::create(d, self.overwrite)?),
            None => None,
        };
        let outcome = outcome(&cfg, sim, dir.as_ref())?;
        notes.push(Note::PredictionTook { seconds: wall.as_secs_f64() });
        let target = crate::summary::predicted_target(&self, model);
        let manifest = quetta_report::RunManifest::new(
            &self.tool,
            settings.clone(),
            target.clone(),
            self.slos.as_ref().map(ToString::to_string),
            self.percentiles.clone(),
        );
        if let Some(d) = &dir {
            d.write_manifest(&manifest)?;
        }
        let mut summary =
            crate::summary::assemble(&self, &outcome, settings, target, notes, None, (None, None));
        if let Some(d) = &dir {
            if let Some(st) = &summary.steady_state {
                summary.steady = d.steady(st, self.slos.as_ref(), &self.percentiles)?;
            }
            d.write_series(&outcome.series)?;
            d.write_summary(&summary)?;
        }
        Ok(BenchReport {
            summary,
            series: outcome.series,
            dir: dir.map(|d| d.path().to_path_buf()),
        })
    }
}

/// A failed write of the predicted records, naming their file.
fn records_err(dir: Option<&RunDir>) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| {
        let path = dir.map(|d| d.path().join(quetta_report::files::REQUESTS));
        let path = path.map_or_else(String::new, |p| p.display().to_string());
        Error::Report(quetta_report::ReportError::Write { path, source })
    }
}

/// The run outcome of predicted observations (records streamed to the directory).
fn outcome(
    cfg: &quetta_loadgen::RunConfig,
    sim: Simulated,
    dir: Option<&RunDir>,
) -> Result<RunOutcome> {
    let Simulated { obs, exhausted, error } = sim;
    use std::io::Write as _;
    let mut agg = Aggregate::new(cfg.slos.clone());
    let mut series = quetta_metrics::series::SeriesBuilder::default();
    let mut w = match dir {
        Some(d) => Some(d.create_records()?),
        None => None,
    };
    let (mut first, mut last, mut busy) = (f64::MAX, f64::MIN, 0.0);
    let n = obs.len() as u64;
    for o in obs {
        let r = RequestRecord::from_observation(o);
        if let Some(s) = r.sent_offset_ms {
            first = first.min(s);
            last = last.max(s);
            busy += r.end_offset_ms - s;
        }
        if let Some(w) = w.as_mut() {
            let line = serde_json::to_string(&r).map_err(Error::encode("a request record"))?;
            writeln!(w, "{line}").map_err(records_err(dir))?;
        }
        agg.add(&r);
        series.add(&r);
    }
    if let Some(mut w) = w {
        w.flush().map_err(records_err(dir))?;
    }
    let s = series.finish();
    let steadiness = series.steadiness(&s);
    Ok(RunOutcome {
        aggregate: agg,
        planned: cfg.num_requests,
        dispatched: n,
        records: n,
        sent: n,
        warmup_completed: 0,
        warmup_failed: 0,
        interrupted: exhausted,
        workload_error: error,
        sink_error: None,
        started_at: SystemTime::now(),
        achieved_send_rate: quetta_metrics::rates::send_rate(
            n,
            (n > 0).then_some(first),
            (n > 0).then_some(last),
        ),
        cancelled_in_drain: 0,
        run_start: Instant::now(),
        series: s,
        steadiness,
        stopped_on_saturation: false,
        sessions: None,
        client: Default::default(),
        busy_s: busy / 1e3,
    })
}
