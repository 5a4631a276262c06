//! Putting a run's summary together: the settings it records, its target, and the notes a
//! reader must see (each derived from the run's own figures).

use quetta_loadgen::{Pacing, RunConfig, RunOutcome, SessionConfig};
use quetta_metrics::{GpuReport, MetricsSummary, ServerReport};
use quetta_report::{
    HistoryKind, LoadKind, Mode, Note, PacingKind, PartialReason, RunSettings, SessionSettings,
    SessionsSummary, SimSettings, Summary, Target,
};
use quetta_workload::spec::{Built, SessionFormat, Source};

use crate::target::{Connected, TargetKind};
use crate::{Benchmark, Load};

/// The settings `summary.json` and `run.json` record (no secrets).
pub(crate) fn settings(
    b: &Benchmark,
    built: &Built,
    load: &Load,
    cfg: &RunConfig,
    sessions: Option<&SessionConfig>,
    c: &Connected,
) -> RunSettings {
    settings_of(b, built, load, cfg, sessions, (c.endpoint(), &c.model))
}

/// The settings of a predicted run (its target is the twin, not a connection).
pub(crate) fn predicted_settings(
    b: &Benchmark,
    built: &Built,
    load: &Load,
    cfg: &RunConfig,
    model: &quetta_sim::model::ServerModel,
) -> RunSettings {
    let name = b.target.model.as_deref().unwrap_or(&model.model);
    settings_of(b, built, load, cfg, None, (predicted_settings_endpoint(b), name))
}

/// The summary's target of a predicted run.
pub(crate) fn predicted_target(b: &Benchmark, model: &quetta_sim::model::ServerModel) -> Target {
    let s = predicted_settings_endpoint(b);
    Target {
        backend: quetta_report::PREDICTED_BACKEND.into(),
        base_url: model.server.clone(),
        endpoint: s.into(),
        model: b.target.model.clone().unwrap_or_else(|| model.model.clone()),
        embedded_simulator: false,
        predicted: true,
        kind: b.target.protocol.kind(),
    }
}

fn predicted_settings_endpoint(b: &Benchmark) -> &'static str {
    b.target.protocol.endpoint()
}

fn settings_of(
    b: &Benchmark,
    built: &Built,
    load: &Load,
    cfg: &RunConfig,
    sessions: Option<&SessionConfig>,
    (endpoint, model): (&str, &str),
) -> RunSettings {
    let w = &b.workload;
    let path = |p: &std::path::Path| p.display().to_string();
    let (trace, dataset, profile) = match &w.source {
        Source::Trace { path: p, .. } => (Some(path(p)), None, None),
        Source::Dataset { path: p, .. } => (None, Some(path(p)), None),
        Source::Profile { name, .. } => (None, None, Some(name.clone())),
        _ => (None, None, None),
    };
    let (request_rate, burstiness) = match load {
        Load::Open { rate, arrival, .. } => (
            Some(*rate),
            match arrival {
                quetta_workload::arrival::Arrival::Gamma { burstiness } => Some(*burstiness),
                _ => None,
            },
        ),
        _ => (None, None),
    };
    let sim = match &b.target.kind {
        TargetKind::Simulator(s) if s.server_model.is_none() => Some(SimSettings {
            ttft_ms: s.ttft.as_secs_f64() * 1e3,
            itl_ms: s.itl.as_secs_f64() * 1e3,
            warm_up: s.warm_up.map(|w| format!("{}:{}", w.lasts.as_secs_f64(), w.slowdown)),
        }),
        _ => None,
    };
    RunSettings {
        endpoint: endpoint.into(),
        model: model.into(),
        load: if sessions.is_some() { LoadKind::Sessions } else { load.kind() },
        concurrency: match load {
            Load::Closed { concurrency } if sessions.is_none() => Some(*concurrency),
            _ => None,
        },
        request_rate,
        arrival: load.arrival_kind(),
        trace_speed: (trace.is_some() || built.has_recorded_times()).then_some(w.replay_speed),
        trace,
        dataset,
        tokenizer: built.tokenizer.clone(),
        burstiness,
        max_concurrency: match (sessions, load) {
            (Some(s), _) => s.max_concurrency,
            (None, Load::Open { max_concurrency, .. } | Load::Recorded { max_concurrency }) => {
                *max_concurrency
            }
            _ => None,
        },
        num_requests: cfg.num_requests,
        duration_s: b.duration.map(|d| d.as_secs_f64()),
        warmup: b.warmup,
        drain_timeout_s: b.drain_timeout.as_secs_f64(),
        profile,
        input_len: built.input_len,
        input_len_stddev: built.input_stddev,
        output_len: built.output_len,
        output_len_stddev: built.output_stddev,
        range_ratio: w.input_range_ratio().filter(|r| *r > 0.0),
        output_range_ratio: w
            .output_range_ratio()
            .filter(|r| *r > 0.0)
            .filter(|r| Some(*r) != w.input_range_ratio().filter(|r| *r > 0.0)),
        prefix_len: w.prefix_len.filter(|n| *n > 0),
        ignore_eos: b.ignore_eos,
        exact_output_length: b.exact_output_length,
        stream: b.stream,
        temperature: b.sampling.temperature,
        top_p: b.sampling.top_p,
        seed: b.seed,
        slo: b.slos.as_ref().map(ToString::to_string),
        http2: b.target.http2,
        insecure: b.target.insecure,
        api_key_given: b.target.api_key.is_some(),
        extra_header_names: b.target.headers.iter().map(|(k, _)| k.clone()).collect(),
        simulator: sim,
        mode: if w.stress { Mode::Stress } else { Mode::Normal },
        reset_prefix_cache: b.reset_prefix_cache.clone(),
        sessions: sessions.map(|s| session_settings(b, s)),
        label: b.label.clone(),
        metadata: b.metadata.clone(),
    }
}

fn session_settings(b: &Benchmark, s: &SessionConfig) -> SessionSettings {
    let w = &b.workload;
    let (source, format) = match &w.source {
        Source::Sessions { path, format, .. } => (
            path.display().to_string(),
            Some(
                match format {
                    SessionFormat::Sharegpt => "sharegpt",
                    SessionFormat::TurnsJsonl => "turns-jsonl",
                    _ => "synth",
                }
                .to_owned(),
            ),
        ),
        Source::Profile { name, .. } => (name.clone(), None),
        _ => (String::new(), None),
    };
    let (concurrency, rate, pacing) = match &s.pacing {
        Pacing::PerSession { sessions } => (Some(*sessions), None, PacingKind::PerSession),
        Pacing::Interleaved { sessions } => (Some(*sessions), None, PacingKind::Interleaved),
        Pacing::Open { rate, .. } => (None, Some(*rate), PacingKind::Open),
        _ => (None, None, PacingKind::Recorded),
    };
    SessionSettings {
        source,
        format,
        session_concurrency: concurrency,
        session_rate: rate,
        pacing,
        think_time: s.think.to_string(),
        history: match s.history {
            quetta_loadgen::History::Recorded => HistoryKind::Recorded,
            _ => HistoryKind::Engine,
        },
        num_sessions: b.sessions.count,
        max_turns: w.max_turns,
    }
}

/// The summary's target.
pub(crate) fn target(b: &Benchmark, c: &Connected) -> Target {
    Target {
        backend: c.backend.clone(),
        base_url: c.base_url.clone(),
        endpoint: c.endpoint().into(),
        model: c.model.clone(),
        embedded_simulator: c.embedded_simulator || b.target.is_simulator(),
        predicted: false,
        kind: c.engine.kind(),
    }
}

/// The server's own timing beside the client's (docs/METRICS.md): a clause for each figure
/// the server gave.
fn server_timing_note(st: &quetta_metrics::ServerTimingSummary, batched: bool) -> Note {
    let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3} ms"));
    let mut parts = Vec::new();
    if st.requests_with_prefill > 0 {
        parts.push(format!(
            "TTFT − server prompt time {} on average (server prompt time {})",
            f(st.ttft_minus_server_prefill_ms_mean),
            f(st.server_prefill_ms_mean)
        ));
    }
    if st.requests_with_tpot > 0 {
        parts.push(format!(
            "TPOT − server per-token time {} (server {})",
            f(st.tpot_minus_server_tpot_ms_mean),
            f(st.server_tpot_ms_mean)
        ));
    }
    if st.requests_with_ttft > 0 {
        parts.push(format!(
            "TTFT − the service's time to first byte {} (service {})",
            f(st.ttft_minus_server_ttft_ms_mean),
            f(st.server_ttft_ms_mean)
        ));
    }
    if st.requests_with_e2e > 0 {
        parts.push(format!(
            "E2E − the service's latency {} (service {})",
            f(st.e2e_minus_server_e2e_ms_mean),
            f(st.server_e2e_ms_mean)
        ));
    }
    let n = [
        st.requests_with_prefill,
        st.requests_with_tpot,
        st.requests_with_ttft,
        st.requests_with_e2e,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    Note::ServerTiming {
        requests: n,
        differences: parts,
        batch_caveat: batched && st.requests_with_prefill > 0,
    }
}

/// Notes the run's own figures call for.
fn metric_notes(b: &Benchmark, m: &MetricsSummary, notes: &mut Vec<Note>) {
    if m.input_token_source == "planned" {
        notes.push(Note::InputTokensPlanned);
    }
    if let Some(d) = m.prompt_tokens_over_plan {
        if d.abs() >= 0.5 {
            let (exact, chat) = (b.workload.tokenizer.is_some(), b.workload.chat);
            notes.push(Note::PromptTokensOverPlan { per_request: d, exact, chat });
        }
    }
    // (an embedding or a ranking generates nothing: no output count, no stream to miss)
    let generates = b.target.request_kind().generates();
    if generates && (m.token_count_source == "chunks" || m.token_count_source == "mixed") {
        notes.push(Note::OutputTokensFromChunks);
    }
    if generates && m.ttft_equals_e2e_for_non_streamed > 0 {
        notes.push(Note::NotStreamed(m.ttft_equals_e2e_for_non_streamed));
    }
    if let Some(lag) = m.schedule_lag_ms.p99 {
        if lag > 1.0 {
            notes.push(Note::ScheduleLag { p99_ms: lag });
        }
    }
}

/// Notes about how the run went.
fn run_notes(o: &RunOutcome, notes: &mut Vec<Note>) {
    if let Some(e) = &o.workload_error {
        let (sent, planned, error) = (o.dispatched, o.planned, e.to_string());
        notes.insert(0, Note::WorkloadFailed { sent, planned, error });
    }
    if let Some(e) = &o.sink_error {
        notes.push(Note::RecordsNotWritten(e.clone()));
    }
    if o.cancelled_in_drain > 0 {
        notes.push(Note::CancelledInDrain(o.cancelled_in_drain));
    }
    if o.records != o.dispatched {
        notes.push(Note::RecordsMissing { dispatched: o.dispatched, records: o.records });
    }
    if o.stopped_on_saturation {
        notes.push(Note::StoppedOnSaturation);
    }
    if o.steadiness.as_ref().is_some_and(|s| s.over_saturated) {
        notes.push(Note::OverSaturated);
    }
    if let Some(c) = o.sessions.as_ref().filter(|c| c.failed > 0) {
        notes.push(Note::SessionsFailed(c.failed));
    }
}

/// The run's summary, from its outcome and what was measured beside it.
pub(crate) fn assemble(
    b: &Benchmark,
    o: &RunOutcome,
    config: RunSettings,
    target: Target,
    mut notes: Vec<Note>,
    server: Option<ServerReport>,
    gpu: (Option<GpuReport>, Option<String>),
) -> Summary {
    let mut metrics = o.aggregate.summary(&b.percentiles);
    metrics.client_overhead =
        metrics.client_overhead.clone().with_runner_busy(o.busy_s, metrics.duration_s);
    if let Some(w) = metrics.client_overhead.warning() {
        notes.insert(0, Note::ClientPaced(w.clone()));
    }
    if let Some(st) = &metrics.server_timing {
        let batched = config.concurrency.unwrap_or(1) > 1 || config.request_rate.is_some();
        notes.push(server_timing_note(st, batched));
    }
    metric_notes(b, &metrics, &mut notes);
    let throttled = metrics.errors.get("throttled").copied().unwrap_or(0);
    if throttled + metrics.throttled_retries > 0 {
        let requests = metrics.completed + metrics.failed;
        let retried = metrics.throttled_retries;
        notes.insert(0, Note::Throttled { throttled, requests, retried });
    }
    run_notes(o, &mut notes);
    if let Some(e) = gpu.1 {
        notes.push(Note::GpuUnavailable(e));
    }
    if let Some(r) = server.as_ref().filter(|r| r.scrapes == 0) {
        let error = r.last_error.clone().unwrap_or_default();
        notes.push(Note::ScrapeFailed { url: r.url.clone(), error });
    }
    let started = o.started_at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let gpu = gpu.0.map(|g| g.with_output_tokens(metrics.total_output_tokens));
    let started_at = quetta_report::rfc3339(started);
    let mut s = Summary::new(&b.tool, started_at, config, target, metrics, o.aggregate.clone());
    s.partial = o.interrupted;
    s.partial_reason = o.interrupted.then_some(if o.stopped_on_saturation {
        PartialReason::Saturated
    } else if b.control.stopped() {
        PartialReason::Stopped
    } else {
        PartialReason::WorkloadEnded
    });
    s.planned = o.planned;
    s.dispatched = o.dispatched;
    s.sent = o.sent;
    s.warmup_completed = o.warmup_completed;
    s.warmup_failed = o.warmup_failed;
    s.achieved_send_rate = o.achieved_send_rate.map(|r| (r * 1e3).round() / 1e3);
    s.cancelled_in_drain = o.cancelled_in_drain;
    s.gpu = gpu;
    s.client.clone_from(&o.client);
    s.notes = notes;
    s.workload_error = o.workload_error.as_ref().map(ToString::to_string);
    s.sessions = o.sessions.as_ref().map(|c| SessionsSummary {
        started: c.started,
        completed: c.completed,
        failed: c.failed,
        truncated: c.truncated,
    });
    s.server_metrics = server;
    s.steady_state.clone_from(&o.steadiness);
    s
}
