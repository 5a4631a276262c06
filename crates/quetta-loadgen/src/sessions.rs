//! Multi-turn sessions: each turn's prompt carries the system prompt, every earlier user
//! message and the engine's own reply to each earlier turn.
//!
//! Pacing ([`Pacing`]): per session (each session sends its next turn when its reply has
//! arrived and its think time has passed), interleaved (a barrier at every turn across a
//! group of sessions: a herd that makes artificial spikes, kept for comparison with tools
//! that do it), or open loop (sessions start at a rate or at recorded times; turns inside
//! a session stay in order). A concurrency cap counts requests in flight, not sessions. A
//! failed turn ends its session, and the session is counted as failed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use quetta_engine::setting::Setting;
use quetta_engine::Prompt;
use quetta_metrics::Observation;
use quetta_workload::arrival::Arrival;
use quetta_workload::session::{Draw, Session, SessionSource};
use quetta_workload::PlannedRequest;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::Semaphore;

use crate::config::{arrival_offsets, RunConfig};
use crate::error::RunError;
use crate::outcome::{RunOutcome, SessionCounts};
use crate::shared::{attempt, sleep_until, Done, Measured, Shared};
use crate::timer::Timer;
use crate::worker::{begin, Guard};
use crate::{Observer, RecordSink};

/// How sessions are paced.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Pacing {
    /// `sessions` sessions at a time; each sends its next turn when its reply has arrived
    /// and its think time has passed, and a finished session is replaced by the next.
    PerSession { sessions: usize },
    /// Groups of `sessions` sessions in lock-step: turn k of every session in the group is
    /// sent together once turn k−1 of all of them has ended (and the think time passed).
    Interleaved { sessions: usize },
    /// Sessions start at `rate` per second following `arrival`.
    Open { rate: f64, arrival: Arrival },
    /// Session i starts at `offsets[i]` (recorded start times).
    Scheduled { offsets: Arc<Vec<Duration>> },
}

/// The pause between a reply's end and the session's next turn.
///
/// ```
/// let t: quetta_loadgen::ThinkTime = "uniform:500ms-3s".parse().unwrap();
/// assert_eq!(t.to_string(), "uniform:500ms-3000ms");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ThinkTime {
    /// Drawn per turn, in milliseconds (`Draw::Fixed { value: 0.0 }`: none).
    Draw(Draw),
    /// The time recorded in the data for each turn; `fallback` where there is none.
    Recorded { fallback: Draw },
}

impl Default for ThinkTime {
    fn default() -> Self {
        Self::Draw(Draw::Fixed { value: 0.0 })
    }
}

/// Milliseconds of `200ms`, `2s` or a bare number of milliseconds.
/// Milliseconds of a think-time duration: `200ms`, `2s`, and a bare number is seconds.
fn ms_of(s: &str) -> Result<f64, String> {
    quetta_metrics::slo::parse_duration_secs(s).map(|d| d.as_secs_f64() * 1e3).ok_or_else(|| {
        format!("{:?} is not a duration (e.g. 0, 200ms, 2s; a bare number is seconds)", s.trim())
    })
}

fn draw_of(s: &str) -> Result<Draw, String> {
    if let Some(m) = s.strip_prefix("exp:") {
        let mean = ms_of(m)?;
        if mean <= 0.0 {
            return Err("the mean must be positive".into());
        }
        return Ok(Draw::Exponential { mean });
    }
    if let Some(r) = s.strip_prefix("uniform:") {
        let (a, b) = r.split_once('-').ok_or("expected MIN-MAX")?;
        let (min, max) = (ms_of(a)?, ms_of(b)?);
        if min > max {
            return Err("MIN is above MAX".into());
        }
        return Ok(Draw::Uniform { min, max });
    }
    Ok(Draw::Fixed { value: ms_of(s)? })
}

/// `0`, `200ms`, `exp:2s` (exponential with this mean), `uniform:500ms-3s`, or
/// `recorded[:FALLBACK]` (the time recorded in the data, else the fallback).
impl std::str::FromStr for ThinkTime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let ctx = |e: String| {
            format!("think time {s:?}: {e}; expected 0, 200ms, exp:MEAN, uniform:MIN-MAX or recorded[:FALLBACK]")
        };
        if let Some(rest) = s.strip_prefix("recorded") {
            let fallback = match rest.strip_prefix(':') {
                Some(f) => draw_of(f).map_err(ctx)?,
                None if rest.is_empty() => Draw::Fixed { value: 0.0 },
                None => return Err(ctx("unknown form".into())),
            };
            return Ok(ThinkTime::Recorded { fallback });
        }
        Ok(ThinkTime::Draw(draw_of(s).map_err(ctx)?))
    }
}

impl std::fmt::Display for ThinkTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let draw = |d: &Draw| match d {
            Draw::Fixed { value } => format!("{value}ms"),
            Draw::Exponential { mean } => format!("exp:{mean}ms"),
            Draw::Uniform { min, max } => format!("uniform:{min}ms-{max}ms"),
            other => format!("{other:?}"),
        };
        match self {
            ThinkTime::Draw(d) => f.write_str(&draw(d)),
            ThinkTime::Recorded { fallback } => write!(f, "recorded:{}", draw(fallback)),
        }
    }
}

/// Which reply earlier turns carry in the history.
///
/// ```
/// assert_eq!(quetta_loadgen::History::default(), quetta_loadgen::History::Engine);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum History {
    /// The engine's own streamed reply (the default).
    #[default]
    Engine,
    /// The reply recorded in the dataset, where there is one.
    Recorded,
}

/// What a session run does beyond [`RunConfig`].
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub pacing: Pacing,
    pub think: ThinkTime,
    pub history: History,
    /// Requests in flight at most (not sessions).
    pub max_concurrency: Option<usize>,
    /// Measured sessions to start at most (default: the source's distinct sessions for a
    /// finite source without a duration, else unbounded).
    pub num_sessions: Option<u64>,
}

impl SessionConfig {
    pub fn per_session(sessions: usize) -> Self {
        Self {
            pacing: Pacing::PerSession { sessions },
            think: ThinkTime::default(),
            history: History::Engine,
            max_concurrency: None,
            num_sessions: None,
        }
    }
}

#[derive(Default)]
struct Counters {
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

/// Shared by every session of one phase.
struct Phase {
    sh: Arc<Shared>,
    sc: SessionConfig,
    source: Arc<Mutex<Box<dyn SessionSource>>>,
    /// Next session index to take from the source.
    next_session: Arc<AtomicU64>,
    /// Sessions this phase may start, and requests it may send.
    session_limit: Option<u64>,
    request_limit: Option<u64>,
    requests: AtomicU64,
    next_id: Arc<AtomicU64>,
    sem: Option<Arc<Semaphore>>,
    deadline: Option<Instant>,
    run_start: Instant,
    tx: mpsc::Sender<Observation>,
    counts: Arc<Counters>,
    timer: Timer,
}

enum Step {
    Continue,
    Done,
    Failed,
    Stopped,
}

/// One session in progress.
struct Live {
    s: Session,
    k: usize,
    replies: Vec<String>,
    /// When the previous reply ended (the think time counts from here).
    prev_end: Option<Instant>,
    /// Prompt + reply tokens of the previous turn (the cached-token estimate).
    prev_tokens: Option<u64>,
    /// Tokens of the history so far (system + messages + replies), for the planned length.
    history_tokens: u64,
    rng: ChaCha8Rng,
}

impl Phase {
    fn stopped(&self) -> bool {
        self.sh.control.stopped() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Take the next session from the source, if the phase may start one.
    fn take_session(&self) -> Option<Live> {
        if self.stopped() {
            return None;
        }
        let i = self.next_session.fetch_add(1, Ordering::SeqCst);
        if self.session_limit.is_some_and(|n| i >= n) {
            return None;
        }
        // this shard's i-th session (the whole plan's i-th unsharded)
        let i = self.sh.cfg.shard.global(i);
        let s = self.source.lock().unwrap_or_else(std::sync::PoisonError::into_inner).session(i)?;
        self.counts.started.fetch_add(1, Ordering::Relaxed);
        let system = s.system.as_ref().map_or(0, |t| t.split_whitespace().count() as u64);
        Some(Live {
            s,
            k: 0,
            replies: Vec::new(),
            prev_end: None,
            prev_tokens: None,
            history_tokens: system,
            rng: ChaCha8Rng::seed_from_u64(
                self.sh.cfg.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
        })
    }

    fn think(&self, l: &mut Live) -> Duration {
        let ms = match &self.sc.think {
            ThinkTime::Draw(d) => d.sample(&mut l.rng),
            ThinkTime::Recorded { fallback } => match l.s.turns[l.k].think_time {
                Some(t) => t.as_secs_f64() * 1e3,
                None => fallback.sample(&mut l.rng),
            },
        };
        Duration::from_secs_f64(ms.max(0.0) / 1e3)
    }

    /// Send turn `l.k` at `intended` (waiting until then) and record it.
    async fn step(&self, l: &mut Live, intended: Instant) -> Step {
        if l.k >= l.s.turns.len() {
            return Step::Done;
        }
        // Wait out the think time (stop and the deadline end the wait).
        loop {
            if self.stopped() {
                return Step::Stopped;
            }
            let now = Instant::now();
            if now >= intended {
                break;
            }
            // Absolute deadlines, so only the last wake-up's timer rounding counts; wake at
            // least every 50 ms to notice a stop.
            let wake = intended.min(now + Duration::from_millis(50));
            self.timer.sleep_until(wake).await;
        }
        if self.request_limit.is_some_and(|n| self.requests.fetch_add(1, Ordering::SeqCst) >= n) {
            return Step::Stopped;
        }
        let k = l.k;
        let turn = &l.s.turns[k];
        let id = self.sh.cfg.shard.global(self.next_id.fetch_add(1, Ordering::Relaxed));
        let planned_input = l.history_tokens + u64::from(turn.new_tokens);
        let p = PlannedRequest {
            index: id,
            prompt: Prompt::Chat(l.s.prompt(k, &l.replies)),
            input_tokens: u32::try_from(planned_input).unwrap_or(u32::MAX),
            input_tokens_exact: false,
            max_tokens: turn.max_tokens,
        };
        let mut req = self.sh.cfg.engine_request(id, p);
        req.session_id = Some(l.s.id.clone());
        req.capture_text = true; // the reply goes into the next turn's history
        let started = Instant::now();
        let mut obs = begin(&req, req_input(planned_input), intended, started, self.run_start);
        obs.turn = Some(u32::try_from(k + 1).unwrap_or(u32::MAX));
        obs.cached_tokens_estimate = l.prev_tokens.map(|p| p.min(planned_input));
        let prog = &self.sh.control.progress;
        prog.dispatched.fetch_add(1, Ordering::Relaxed);
        let mut g = Guard::new(obs, self.tx.clone(), self.run_start);
        let permit = match &self.sem {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        };
        prog.in_flight.fetch_add(1, Ordering::Relaxed);
        let o = g.obs.as_mut().expect("fresh guard");
        let tail = attempt(&self.sh, req, self.run_start, o).await;
        let ok = o.error.is_none();
        let reply = if self.sh.cfg.capture_text { o.text.clone() } else { o.text.take() };
        let reply = reply.unwrap_or_default();
        let usage = o.usage;
        let prompt_tokens = usage.and_then(|u| u.prompt_tokens).unwrap_or(planned_input);
        let reply_tokens =
            usage.and_then(|u| u.completion_tokens).unwrap_or(u64::from(o.token_chunks));
        l.prev_end = Some(self.run_start + o.end);
        prog.account(g);
        tail.finish().await;
        drop(permit);
        if !ok {
            return Step::Failed;
        }
        l.prev_tokens = Some(prompt_tokens + reply_tokens);
        let reply = match (self.sc.history, &turn.recorded_reply) {
            (History::Recorded, Some(r)) => r.clone(),
            _ => reply,
        };
        l.history_tokens = planned_input + reply.split_whitespace().count() as u64;
        l.replies.push(reply);
        l.k += 1;
        if l.k >= l.s.turns.len() {
            Step::Done
        } else {
            Step::Continue
        }
    }

    /// Count a session's end. A session stopped early is not counted here: the truncated
    /// figure is derived at the end (started − completed − failed), which also covers
    /// sessions cancelled at the drain timeout that never reach this point.
    fn count_end(&self, step: &Step) {
        match step {
            Step::Done => self.counts.completed.fetch_add(1, Ordering::Relaxed),
            Step::Failed => self.counts.failed.fetch_add(1, Ordering::Relaxed),
            Step::Stopped | Step::Continue => 0,
        };
    }

    /// Run one session to its end; its first turn is intended at `start`.
    async fn run_one(&self, mut l: Live, start: Instant) {
        let mut intended = start;
        loop {
            let step = self.step(&mut l, intended).await;
            if let Step::Continue = step {
                let think = self.think(&mut l);
                intended = l.prev_end.unwrap_or_else(Instant::now) + think;
                continue;
            }
            self.count_end(&step);
            return;
        }
    }
}

fn req_input(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Per-session pacing: `n` sessions at a time.
async fn per_session(ph: &Arc<Phase>, n: usize) {
    let mut handles = Vec::new();
    for _ in 0..n {
        let ph2 = ph.clone();
        ph.sh.outstanding.fetch_add(1, Ordering::SeqCst);
        let h = tokio::spawn(async move {
            let _done = Done(ph2.sh.clone());
            while let Some(l) = ph2.take_session() {
                ph2.run_one(l, Instant::now()).await;
            }
        });
        ph.sh.track(h.abort_handle());
        handles.push(h);
    }
    drop(handles);
    ph.sh.idle_or_stop(ph.deadline).await;
}

/// Interleaved pacing: groups of `n` sessions, a barrier at every turn.
async fn interleaved(ph: &Arc<Phase>, n: usize) {
    loop {
        let mut group: Vec<Live> = (0..n).map_while(|_| ph.take_session()).collect();
        if group.is_empty() {
            return;
        }
        let mut intended = Instant::now();
        while !group.is_empty() {
            let mut tasks = Vec::new();
            for mut l in group.drain(..) {
                let ph2 = ph.clone();
                ph.sh.outstanding.fetch_add(1, Ordering::SeqCst);
                let h = tokio::spawn(async move {
                    let _done = Done(ph2.sh.clone());
                    let step = ph2.step(&mut l, intended).await;
                    (l, step)
                });
                ph.sh.track(h.abort_handle());
                tasks.push(h);
            }
            let mut latest = Instant::now();
            for t in tasks {
                let Ok((mut l, step)) = t.await else { continue };
                if let Step::Continue = step {
                    latest = latest.max(l.prev_end.unwrap_or(latest));
                    let think = ph.think(&mut l);
                    l.prev_end = Some(l.prev_end.unwrap_or(latest) + think);
                    group.push(l);
                } else {
                    ph.count_end(&step);
                }
            }
            // Every surviving session sends its next turn together: after the slowest
            // reply of the group plus the longest think time drawn.
            intended = group.iter().filter_map(|l| l.prev_end).max().unwrap_or(latest).max(latest);
        }
    }
}

/// Open loop: a dispatcher thread starts each session at its intended time.
async fn open(ph: &Arc<Phase>, offsets: Vec<Duration>) {
    let handle = tokio::runtime::Handle::current();
    let ph2 = ph.clone();
    ph.sh.outstanding.fetch_add(1, Ordering::SeqCst);
    let dispatcher = std::thread::Builder::new()
        .name("quetta-sessions".into())
        .spawn(move || {
            let ph = ph2;
            for off in &offsets {
                let intended = ph.run_start + *off;
                sleep_until(intended, &ph.sh.control);
                let Some(l) = ph.take_session() else { break };
                let ph3 = ph.clone();
                ph.sh.outstanding.fetch_add(1, Ordering::SeqCst);
                let h = handle.spawn(async move {
                    let _done = Done(ph3.sh.clone());
                    ph3.run_one(l, intended).await;
                });
                ph.sh.track(h.abort_handle());
            }
            ph.sh.task_done();
        })
        .expect("spawn the session dispatcher thread");
    let _ = tokio::task::spawn_blocking(move || dispatcher.join()).await;
}

/// Run multi-turn sessions (the runner's session half). `sh.cfg` gives the request
/// settings, the request limit (`num_requests`: turns), the duration, the drain timeout and
/// the seed; `cfg.warmup` sessions are run first (per-session pacing) and left out of the
/// results.
pub(crate) async fn run(
    sh: &Arc<Shared>,
    source: Box<dyn SessionSource>,
    sc: SessionConfig,
    sink: Option<Box<dyn RecordSink>>,
    observers: Vec<Arc<dyn Observer>>,
) -> Result<RunOutcome, RunError> {
    validate(&sh.cfg, &sc)?;
    let cfg = &sh.cfg;
    let finite = source.distinct();
    let source = Arc::new(Mutex::new(source));
    let next_session = Arc::new(AtomicU64::new(0));
    let next_id = Arc::new(AtomicU64::new(0));
    let sem = sc.max_concurrency.map(|n| Arc::new(Semaphore::new(cfg.shard.share_usize(n).max(1))));
    let timer = Timer::start();
    let phase = |tx, session_limit, request_limit, deadline, run_start, counts| {
        Arc::new(Phase {
            sh: sh.clone(),
            sc: sc.clone(),
            source: source.clone(),
            next_session: next_session.clone(),
            session_limit,
            request_limit,
            requests: AtomicU64::new(0),
            next_id: next_id.clone(),
            sem: sem.clone(),
            deadline,
            run_start,
            tx,
            counts,
            timer: timer.clone(),
        })
    };

    let mut warm = (0, 0);
    if cfg.warmup > 0 && !sh.control.stopped() {
        let (tx, rx) = mpsc::channel::<Observation>();
        let n = match sc.pacing {
            Pacing::PerSession { sessions } | Pacing::Interleaved { sessions } => sessions,
            _ => cfg.warmup as usize,
        };
        let shard = cfg.shard;
        let ph =
            phase(tx, Some(shard.share(cfg.warmup)), None, None, Instant::now(), Arc::default());
        per_session(&ph, shard.share_usize(n.min(cfg.warmup as usize)).max(1)).await;
        drop(ph);
        warm = sh.finish_warmup(&rx).await;
    }

    if let Some(h) = &cfg.before_measured {
        h.call().await?;
    }
    let (tx, rx) = mpsc::channel::<Observation>();
    let m = Measured::begin(sh, rx, sink, observers, warm);
    let deadline = cfg.duration.map(|d| m.run_start + d);
    let first = next_session.load(Ordering::SeqCst);
    // Without a session count, a finite source is played once (unless a duration is given).
    let count = sc.num_sessions.or(if cfg.duration.is_none() { finite } else { None });
    let counts = Arc::new(Counters::default());
    // A shard starts its share of sessions `warmup..warmup + count` and of the turn limit.
    let shard = cfg.shard;
    let ph = phase(
        tx,
        count.map(|n| first + shard.share_of(cfg.warmup, n)),
        cfg.num_requests.map(|n| shard.share(n)),
        deadline,
        m.run_start,
        counts.clone(),
    );
    match sc.pacing.clone() {
        Pacing::PerSession { sessions } => per_session(&ph, shard.share_usize(sessions)).await,
        Pacing::Interleaved { sessions } => interleaved(&ph, shard.share_usize(sessions)).await,
        Pacing::Scheduled { offsets } => open(&ph, shard.pick(cfg.warmup, &offsets)).await,
        Pacing::Open { rate, arrival } => {
            if count.is_none() && cfg.duration.is_none() {
                return Err(RunError::Unbounded { what: "sessions" });
            }
            let offsets = arrival_offsets(arrival, rate, cfg.seed, count, cfg.duration)?;
            open(&ph, shard.pick(cfg.warmup, &offsets)).await;
        }
    }
    // Sessions still running belong to the drain; the phase's own handle goes now so that
    // the recorder sees the channel close once the last session ends.
    ph.sh.idle_or_stop(deadline).await;
    drop(ph);
    drop(timer);
    let mut out = m.finish(sh, None).await;
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (started, completed, failed) =
        (c(&counts.started), c(&counts.completed), c(&counts.failed));
    // Sessions cancelled at the drain timeout never counted their end: they were cut short.
    out.sessions = Some(SessionCounts {
        started,
        completed,
        failed,
        truncated: started.saturating_sub(completed + failed),
        turns: out.dispatched,
    });
    Ok(out)
}

fn validate(cfg: &RunConfig, sc: &SessionConfig) -> Result<(), RunError> {
    let bad = |s: Setting, m: &str| Err(RunError::invalid(s, m));
    match &sc.pacing {
        Pacing::PerSession { sessions: 0 } | Pacing::Interleaved { sessions: 0 } => {
            return bad(
                Setting::SessionConcurrency,
                "the number of concurrent sessions must be at least 1",
            )
        }
        Pacing::Open { rate, .. } if !(rate.is_finite() && *rate > 0.0) => {
            return bad(
                Setting::SessionRate,
                "session rate must be a positive number of sessions per second",
            )
        }
        _ => {}
    }
    if sc.max_concurrency == Some(0) {
        return bad(Setting::MaxConcurrency, "max concurrency must be at least 1");
    }
    let split = match &sc.pacing {
        Pacing::PerSession { sessions } | Pacing::Interleaved { sessions } => {
            cfg.shard.check_split("the number of concurrent sessions", *sessions)
        }
        _ => Ok(()),
    };
    split
        .and(sc.max_concurrency.map_or(Ok(()), |c| cfg.shard.check_split("max concurrency", c)))?;
    if sc.num_sessions == Some(0) || cfg.num_requests == Some(0) {
        return bad(Setting::Sessions, "the number of sessions and of requests must be at least 1");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_times_parse_and_print() {
        for (s, shown) in [
            ("0", "0ms"),
            ("20ms", "20ms"),
            ("2s", "2000ms"),
            ("2", "2000ms"),
            ("0.5", "500ms"),
            ("exp:2s", "exp:2000ms"),
            ("uniform:1-3", "uniform:1000ms-3000ms"),
            ("uniform:500ms-3s", "uniform:500ms-3000ms"),
            ("recorded", "recorded:0ms"),
            ("recorded:exp:1s", "recorded:exp:1000ms"),
        ] {
            let t: ThinkTime = s.parse().unwrap();
            assert_eq!(t.to_string(), shown, "{s}");
            assert_eq!(shown.parse::<ThinkTime>().unwrap(), t, "{shown} reads back");
        }
        for bad in ["soon", "uniform:3s-1s", "exp:0", "recordedx"] {
            assert!(bad.parse::<ThinkTime>().is_err(), "{bad}");
        }
        assert!("uniform:3s-1s".parse::<ThinkTime>().unwrap_err().contains("MIN is above MAX"));
    }
}
