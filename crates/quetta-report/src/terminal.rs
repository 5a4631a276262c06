//! The terminal rendering of a run's summary: the results block, the metric and per-turn
//! tables, the throughput, server, client and shard lines.

use std::fmt::Write as _;
use std::path::Path;

use quetta_metrics::{MetricsSummary, ServerReport, SloVerdict, Stats};

use crate::summary::Summary;

/// The per-turn table of a multi-turn run (empty for other runs).
pub fn turn_table(m: &MetricsSummary) -> String {
    let mut s = String::new();
    if m.per_turn.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "{:<6}{:>6}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>8}",
        "turn",
        "ok",
        "fail",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "E2E p50",
        "E2E p99",
        "input",
        "prefill",
        "cached",
        "hit %"
    );
    let tok = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    let mut estimated = false;
    for t in &m.per_turn {
        let est = t.cached_token_source == "estimate";
        estimated |= est;
        let _ = writeln!(
            s,
            "{:<6}{:>6}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>8}",
            t.turn,
            t.completed,
            t.failed,
            cell(t.ttft_ms.p50),
            cell(t.ttft_ms.p99),
            cell(t.tpot_ms.p50),
            cell(t.e2e_ms.p50),
            cell(t.e2e_ms.p99),
            tok(t.input_tokens_mean),
            tok(t.new_prefill_tokens_mean),
            format!("{}{}", tok(t.cached_tokens_mean), if est { "~" } else { "" }),
            t.cache_hit_rate.map_or_else(|| "-".to_owned(), |r| format!("{:.1}", r * 100.0)),
        );
    }
    let _ = writeln!(
        s,
        "(latencies in ms; token columns are means per request; {})",
        if estimated {
            "~: cached tokens estimated from the previous turn, the server reported none"
        } else {
            "cached tokens as the server reported them"
        }
    );
    s
}

/// Format an optional number of milliseconds for a table cell.
fn cell(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 10_000.0 => format!("{v:.0}"),
        Some(v) if v >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
        None => "-".into(),
    }
}

/// The latency rows every view of a run shows (terminal, HTML, PDF), in order: the non-empty
/// ones, and of a predicted run (no client ran) none of the client's own figures (queue,
/// schedule lag, read lag, turnaround, release), which it records as zeros.
pub(crate) fn latency_rows(sum: &Summary) -> Vec<(&'static str, &Stats)> {
    let m = &sum.metrics;
    let co = &m.client_overhead;
    let per_input = m.per_input_ms.as_ref();
    let measured = [
        ("TTFT", Some(&m.ttft_ms)),
        ("TTFO (first answer token)", Some(&m.ttfo_ms)),
        ("TPOT", Some(&m.tpot_ms)),
        ("ITL (pooled)", Some(&m.itl_ms)),
        ("ITL (per-request mean)", Some(&m.itl_request_mean_ms)),
        ("E2E", Some(&m.e2e_ms)),
        ("E2E per input", per_input),
        ("TTFT from intended send", Some(&m.ttft_from_intended_ms)),
        ("E2E from intended send", Some(&m.e2e_from_intended_ms)),
    ];
    let client = [
        ("Queue (slot + connection)", Some(&m.queue_ms)),
        ("Schedule lag (client)", Some(&m.schedule_lag_ms)),
        ("Read lag (client)", Some(&co.read_lag_ms)),
        ("Turnaround (client)", Some(&co.turnaround_ms)),
        ("Release (client)", Some(&co.release_ms)),
    ];
    let client = if sum.target.is_predicted() { &client[..0] } else { &client[..] };
    measured
        .iter()
        .chain(client)
        .filter_map(|(name, st)| st.filter(|st| st.count > 0).map(|st| (*name, st)))
        .collect()
}

/// The throughput and token lines: of generation, or (embeddings, rankings) of inputs.
fn throughput_lines(sum: &Summary) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let cached = if m.total_cached_tokens > 0 {
        format!(", {} cached", m.total_cached_tokens)
    } else {
        String::new()
    };
    if !sum.target.kind.generates() {
        let _ = writeln!(
            s,
            "throughput {:.2} req/s ({:.1} req/min), {:.1} inputs/s, input {:.1} tok/s",
            m.request_throughput,
            m.request_throughput * 60.0,
            m.input_throughput,
            m.input_token_throughput
        );
        let _ = writeln!(
            s,
            "tokens     {} in over {} inputs (counts from {}){cached}",
            m.total_input_tokens, m.total_inputs, m.input_token_source
        );
        return s;
    }
    let _ = writeln!(
        s,
        "throughput {:.2} req/s ({:.1} req/min), output {:.1} tok/s, input {:.1} tok/s, total {:.1} tok/s",
        m.request_throughput,
        m.request_throughput * 60.0,
        m.output_token_throughput,
        m.input_token_throughput,
        m.total_token_throughput
    );
    let _ = writeln!(
        s,
        "tokens     {} in, {} out (output counts from {}, input counts from {}){cached}",
        m.total_input_tokens, m.total_output_tokens, m.token_count_source, m.input_token_source,
    );
    if m.total_audio_s > 0.0 {
        let _ = writeln!(
            s,
            "audio      {:.1} s transcribed, {:.2} s of audio per second (RTFx)",
            m.total_audio_s, m.rtfx
        );
    }
    s
}

/// The percentile table of a summary's latency metrics.
pub fn metric_table(sum: &Summary) -> String {
    let rows = latency_rows(sum);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "latency (ms)", "count", "mean", "min", "p50", "p90", "p95", "p99", "p99.9", "max"
    );
    for (name, st) in rows {
        let _ = writeln!(
            s,
            "{:<28}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            name,
            st.count,
            cell(st.mean),
            cell(st.min),
            cell(st.p50),
            cell(st.p90),
            cell(st.p95),
            cell(st.p99),
            cell(st.p999),
            cell(st.max)
        );
        if !st.extra.is_empty() {
            let extra: Vec<String> =
                st.extra.iter().map(|(k, v)| format!("{k}={}", cell(*v))).collect();
            let _ = writeln!(s, "{:<28}  {}", "", extra.join("  "));
        }
    }
    s
}

/// What the server's own metrics said, in one line.
fn server_line(sm: &ServerReport) -> String {
    let mut head = format!("{} ({} scrapes", sm.server, sm.scrapes);
    if sm.failed_scrapes > 0 {
        let _ = write!(head, ", {} failed", sm.failed_scrapes);
    }
    head.push(')');
    let mut parts = vec![head];
    for (k, label) in [
        ("queue_time_s", "queue"),
        ("prefill_time_s", "prefill"),
        ("decode_time_s", "decode"),
        ("ttft_s", "TTFT"),
        ("first_response_s", "first response"),
        ("compute_time_s", "compute"),
        ("e2e_s", "E2E"),
    ] {
        if let Some(v) = sm.mean(k) {
            parts.push(format!("{label} mean {:.1} ms", v * 1e3));
        }
    }
    if let Some(r) = sm.prefix_cache_hit_rate() {
        parts.push(format!("prefix-cache hit rate {:.1}%", r * 100.0));
    }
    if let Some(p) = sm.deltas.get("preemptions") {
        parts.push(format!("{:.0} preemptions", p.delta));
    }
    parts.join(", ")
}

/// The run-level SLO verdict, in one line.
pub fn verdict_line(v: &SloVerdict) -> String {
    let each: Vec<String> = v
        .objectives
        .iter()
        .map(|o| match o.value_ms {
            Some(v) => format!(
                "{} {} ({} ms)",
                if o.pass { "met" } else { "MISSED" },
                o.objective,
                crate::chart::figure(Some(v))
            ),
            None => format!("MISSED {} (no samples)", o.objective),
        })
        .collect();
    format!("{}: {}", if v.pass { "PASS" } else { "FAIL" }, each.join("; "))
}

/// `PARTIAL: 18 of 200 planned (stopped before the end)` for a run that was cut short
/// (`PARTIAL` alone when no count was planned; the reason when the summary has one), as the
/// terminal and the reports show it; `None` for a whole run.
pub fn partial_label(sum: &Summary) -> Option<String> {
    if !sum.partial {
        return None;
    }
    let ended = sum.metrics.completed + sum.metrics.failed;
    let label = cut_short(ended, sum.planned);
    Some(match sum.partial_reason {
        Some(r) => format!("{label} ({})", r.words()),
        None => label,
    })
}

/// `FAILED: …` for a run that failed as a whole, as the reports' banner and the summary's
/// note say it: its workload ended on an error, or every measured request failed; `None`
/// otherwise.
pub fn failed_label(sum: &Summary) -> Option<String> {
    if let Some(e) = &sum.workload_error {
        return Some(workload_failed(sum.dispatched, sum.planned, e));
    }
    let m = &sum.metrics;
    (m.completed == 0 && m.failed > 0)
        .then(|| format!("FAILED: every one of the {} measured requests failed", m.failed))
}

/// `FAILED: the workload ended after 3 of 10 requests: …`: one wording for the note and
/// the banner of a run whose workload could not build a request.
pub fn workload_failed(sent: u64, planned: Option<u64>, error: &str) -> String {
    let of = planned.map_or_else(|| "its planned".to_owned(), |p| p.to_string());
    format!("FAILED: the workload ended after {sent} of {of} requests: {error}")
}

/// `PARTIAL: 6 of 100 planned`, or `PARTIAL` without a planned count: one wording for runs
/// and sweep steps, in the terminal and the reports.
pub(crate) fn cut_short(ended: u64, planned: Option<u64>) -> String {
    match planned {
        Some(p) => format!("PARTIAL: {ended} of {p} planned"),
        None => "PARTIAL".to_owned(),
    }
}

/// A setting as people read it: `5`, `chat`, `ttft_ms 20, itl_ms 5` (not JSON).
pub(crate) fn setting_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k} {}", setting_text(v)))
            .collect::<Vec<_>>()
            .join(", "),
        serde_json::Value::Array(a) => a.iter().map(setting_text).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The errors of a run: counts by kind, then the most frequent messages in the server's
/// own words.
pub fn error_lines(m: &MetricsSummary) -> String {
    let mut s = String::new();
    if m.errors.is_empty() {
        let _ = writeln!(s, "errors     none");
        return s;
    }
    let e: Vec<String> = m.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(s, "errors     {}", e.join(", "));
    for t in &m.top_errors {
        let msg: String = t.message.chars().take(200).collect();
        let more = if t.message.chars().count() > 200 { "..." } else { "" };
        let _ = writeln!(s, "  {:>6} x  {}: {msg}{more}", t.count, t.kind);
    }
    s
}

/// The metric tables and the errors of a run; the errors alone when nothing succeeded.
fn results_block(sum: &Summary) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let all_failed = m.completed == 0 && m.failed > 0;
    if all_failed {
        let _ = writeln!(s, "\nFAILED     every one of the {} measured requests failed", m.failed);
        s.push_str(&error_lines(m));
    } else {
        let _ = writeln!(s);
        s.push_str(&metric_table(sum));
        if !m.per_turn.is_empty() {
            let _ = writeln!(s);
            s.push_str(&turn_table(m));
        }
        let _ = writeln!(s);
        s.push_str(&error_lines(m));
    }
    s
}

/// The steady window in words, and (name, steady figure, whole-run figure) for each figure
/// that differs between the two: what the terminal, HTML and PDF show of `steady`.
pub(crate) fn steady_view(sum: &Summary) -> Option<(String, Vec<[String; 3]>)> {
    let Some(st) = &sum.steady_state else {
        return (sum.metrics.completed > 0)
            .then(|| ("no window: the sending phase was too short to judge".into(), Vec::new()));
    };
    if let Some(why) = st.no_window {
        return Some((format!("no window: {}", why.words()), Vec::new()));
    }
    let (a, b) = (st.steady_from_s?, st.steady_to_s?);
    let by =
        st.set_by.map_or(String::new(), |x| format!(", warm-up ended last in {}", signal_name(x)));
    let Some(w) = &sum.steady else {
        return Some((
            format!("seconds {a} to {b} (MSER-5{by}); no records to measure it"),
            Vec::new(),
        ));
    };
    let (m, all) = (&w.metrics, &sum.metrics);
    let head =
        format!("seconds {a} to {b} (MSER-5{by}): {} requests sent in it", m.completed + m.failed);
    let mut rows = Vec::new();
    let mut row = |name: &str, x: String, y: String| {
        if x != y {
            rows.push([name.to_owned(), x, y]);
        }
    };
    let rate = |v: f64| format!("{v:.2}");
    row("requests/s", rate(m.request_throughput), rate(all.request_throughput));
    if sum.target.kind.generates() {
        row("output tok/s", rate(m.output_token_throughput), rate(all.output_token_throughput));
    }
    let pp = |st: &Stats| format!("p50 {} p99 {}", cell(st.p50), cell(st.p99));
    for ((name, x), (_, y)) in latency_rows_of(m, sum).into_iter().zip(latency_rows_of(all, sum)) {
        if x.count > 0 {
            row(&format!("{name} (ms)"), pp(x), pp(y));
        }
    }
    Some((head, rows))
}

/// The `steady` lines of the terminal summary.
fn steady_lines(sum: &Summary) -> String {
    let mut s = String::new();
    let Some((head, rows)) = steady_view(sum) else { return s };
    let _ = writeln!(s, "steady     {head}");
    for [name, x, y] in rows {
        let _ = writeln!(s, "           {name:<16}{x:>26}   whole run {y}");
    }
    s
}

/// The main latency metrics of a set of figures, for the steady lines.
fn latency_rows_of<'a>(m: &'a MetricsSummary, sum: &Summary) -> Vec<(&'static str, &'a Stats)> {
    if sum.target.kind.generates() {
        vec![("TTFT", &m.ttft_ms), ("TPOT", &m.tpot_ms), ("ITL", &m.itl_ms), ("E2E", &m.e2e_ms)]
    } else {
        vec![("E2E", &m.e2e_ms)]
    }
}

fn signal_name(x: quetta_metrics::steady::Signal) -> &'static str {
    use quetta_metrics::steady::Signal;
    match x {
        Signal::InFlight => "requests in flight",
        Signal::Ttft => "TTFT",
        Signal::Itl => "ITL",
        _ => "a signal",
    }
}

/// The `client` line: the client's CPU and memory, and how much of the run it took.
fn client_line(sum: &Summary) -> String {
    // milliseconds below a second: a short run's CPU is not "0.00 s"
    let cpu = |v: f64| if v < 1.0 { format!("{:.1} ms", v * 1e3) } else { format!("{v:.2} s") };
    let co = &sum.metrics.client_overhead;
    let mut own = String::new();
    if let Some(p) = co.read_lag_ms.p99 {
        let _ = write!(own, "; read lag p99 {p:.3} ms");
    }
    if let Some(sh) = co.client_share {
        let _ = write!(own, ", {:.2}% of each slot's cycle in the client", sh * 100.0);
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "client     cpu {} user + {} system (process from its start: {} + {}), peak RSS {} MiB{own}",
        cpu(sum.client.cpu_user_s),
        cpu(sum.client.cpu_system_s),
        cpu(sum.client.process_cpu_user_s),
        cpu(sum.client.process_cpu_system_s),
        sum.client.peak_rss_kib / 1024
    );
    s
}

/// The terminal summary of a run.
/// The shard lines: a shard's place and clock, or a merged run's shards.
fn shard_lines(sum: &Summary) -> String {
    let ms = |v: Option<f64>| v.map_or("unknown".into(), |v| format!("{v:.3} ms"));
    let mut s = String::new();
    if let Some(r) = &sum.shard {
        let _ = write!(s, "shard      {}/{}", r.index, r.count);
        if let Some(p) = r.planned {
            let _ = write!(s, ", {p} requests of the plan");
        }
        match &r.coordinator {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "; met shard 0 at {c}: clock offset {} (round trip {}), start skew {}",
                    ms(r.clock_offset_ms),
                    ms(r.clock_rtt_ms),
                    ms(r.start_skew_ms)
                );
            }
            None => s.push_str(
                "; ran alone (no common start): merge the shards with quetta-bench merge\n",
            ),
        }
    }
    if let Some(m) = &sum.shards {
        let by = |st: &str| m.shards.iter().filter(|r| r.status == st).count();
        let _ = writeln!(
            s,
            "shards     {} of {} merged ({} finished, {} partial, {} died); start skew max {}, clock offset max {}",
            m.shards.len(),
            m.count,
            by("finished"),
            by("partial"),
            by("died"),
            ms(m.max_start_skew_ms),
            ms(m.max_clock_offset_ms)
        );
    }
    s
}

pub fn render_summary(sum: &Summary, output_dir: Option<&Path>) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let t = &sum.target;
    let partial = partial_label(sum).map_or(String::new(), |p| format!(" ({p})"));
    let _ = writeln!(s, "\n== Quetta results{partial} ==");
    let _ = writeln!(
        s,
        "target     {} {} model {}{}",
        t.backend,
        t.base_url,
        t.model,
        if t.embedded_simulator { " (embedded simulator)" } else { "" }
    );
    let _ = writeln!(
        s,
        "requests   {} completed, {} failed{}{}  in {:.2} s",
        m.completed,
        m.failed,
        sum.planned.map_or(String::new(), |p| format!(" of {p} planned")),
        if sum.warmup_completed + sum.warmup_failed > 0 {
            format!(" (+{} warmup)", sum.warmup_completed + sum.warmup_failed)
        } else {
            String::new()
        },
        m.duration_s
    );
    s.push_str(&throughput_lines(sum));
    if let (Some(req), Some(ach)) = (sum.requested_rate, sum.achieved_send_rate) {
        let _ =
            writeln!(s, "rate       requested {req:.2} req/s, achieved send rate {ach:.2} req/s");
    }
    if let Some(x) = &sum.sessions {
        let _ = writeln!(
            s,
            "sessions   {} started: {} completed, {} failed, {} cut short",
            x.started, x.completed, x.failed, x.truncated
        );
    }
    if let Some(r) = m.osl_hit_rate {
        let _ = writeln!(
            s,
            "output     {:.1}% of requests generated exactly the planned length",
            r * 100.0
        );
    }
    s.push_str(&results_block(sum));
    if let Some(g) = &m.goodput {
        let per: Vec<String> =
            g.share_meeting.iter().map(|(k, v)| format!("{k} {:.1}%", v * 100.0)).collect();
        let _ = writeln!(
            s,
            "goodput    {:.2} req/s meeting {} ({:.1}% of requests; {})",
            g.request_rate,
            g.slo,
            g.share_meeting_all * 100.0,
            per.join(", ")
        );
    }
    if let Some(st) = &sum.steady_state {
        let _ = writeln!(
            s,
            "load       in flight {:.1} (first half) -> {:.1} (second half){}",
            st.in_flight_first_half,
            st.in_flight_second_half,
            if st.over_saturated { "; OVER-SATURATED: the server does not keep up" } else { "" }
        );
    }
    s.push_str(&steady_lines(sum));
    if let Some(sm) = &sum.server_metrics {
        let _ = writeln!(s, "server     {}", server_line(sm));
    }
    if let Some(g) = &sum.gpu {
        if let Some(e) = g.energy_j {
            let _ = writeln!(
                s,
                "gpu        {} GPUs, average {:.0} W, {:.1} J{}",
                g.devices.len(),
                g.avg_power_w.unwrap_or(0.0),
                e,
                g.energy_per_output_token_j
                    .map_or(String::new(), |j| format!(", {j:.3} J per output token"))
            );
        }
    }
    if let Some(v) = &m.slo_verdict {
        let _ = writeln!(s, "slo        {}", verdict_line(v));
    }
    if m.retried_requests > 0 {
        let _ = writeln!(
            s,
            "retried    {} requests needed {} extra attempts (retries allowed)",
            m.retried_requests, m.retry_attempts
        );
    }
    let ended = m.completed + m.failed;
    if sum.target.is_predicted() {
        let _ = writeln!(s, "client     none: predicted on the twin's virtual clock (no connections, no client figures)");
    } else if ended > 0 {
        let mut line = format!("connections {} new for {ended} requests", m.new_connections);
        if m.stale_connection_retries > 0 {
            let _ = write!(
                line,
                "; {} resent on a new one, as the server had closed their pooled connection before they were written",
                m.stale_connection_retries
            );
        }
        let _ = writeln!(s, "{line} (see docs/METRICS.md, Connections)");
    }
    if !sum.target.is_predicted() {
        s.push_str(&client_line(sum));
    }
    s.push_str(&shard_lines(sum));
    for n in &sum.notes {
        let _ = writeln!(s, "note       {n}");
    }
    if let Some(d) = output_dir {
        let _ = writeln!(s, "results    {}", d.display());
    }
    s
}
