//! Exports of a run's records: CSV and Parquet (one row per request, the same columns), and
//! the result JSON of `vllm bench serve --save-result` ([`VllmResult`]).

use std::path::Path;

use quetta_metrics::{RequestRecord, Stats};
use serde::{Deserialize, Serialize};

use crate::dir::{ReportError, RunDir};
use crate::summary::Summary;

/// The columns of the CSV export (and of the Parquet file), in order.
pub const CSV_COLUMNS: &[&str] = &[
    "id",
    "session_id",
    "turn",
    "intended_offset_ms",
    "started_offset_ms",
    "sent_offset_ms",
    "first_token_offset_ms",
    "end_offset_ms",
    "ttft_ms",
    "ttfo_ms",
    "tpot_ms",
    "e2e_ms",
    "ttft_from_intended_ms",
    "e2e_from_intended_ms",
    "queue_ms",
    "schedule_lag_ms",
    "itl_count",
    "itl_mean_ms",
    "token_chunks",
    "input_tokens",
    "input_token_source",
    "output_tokens",
    "output_token_source",
    "cached_tokens",
    "planned_input_tokens",
    "planned_output_tokens",
    "streamed",
    "status",
    "finish_reason",
    "connection_reused",
    "attempts",
    "error_kind",
    "error",
    "inputs",
    "audio_s",
    "server_prefill_ms",
    "server_tpot_ms",
    "server_ttft_ms",
    "server_e2e_ms",
];

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn num<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

/// One record's CSV row, in [`CSV_COLUMNS`] order.
fn csv_row(r: &RequestRecord) -> String {
    let cells = [
        r.id.to_string(),
        quote(r.session_id.as_deref().unwrap_or("")),
        num(r.turn),
        r.intended_offset_ms.to_string(),
        r.started_offset_ms.to_string(),
        num(r.sent_offset_ms),
        num(r.first_token_offset_ms),
        r.end_offset_ms.to_string(),
        num(r.ttft_ms),
        num(r.ttfo_ms),
        num(r.tpot_ms),
        num(r.e2e_ms),
        num(r.ttft_from_intended_ms),
        num(r.e2e_from_intended_ms),
        r.queue_ms.to_string(),
        r.schedule_lag_ms.to_string(),
        r.itl_us.len().to_string(),
        num(r.itl_mean_ms()),
        r.token_chunks.to_string(),
        num(r.input_tokens),
        r.input_token_source.as_str().into(),
        num(r.output_tokens),
        r.output_token_source.as_str().into(),
        num(r.cached_tokens),
        r.planned_input_tokens.to_string(),
        r.planned_output_tokens.to_string(),
        r.streamed.to_string(),
        num(r.status),
        quote(r.finish_reason.as_deref().unwrap_or("")),
        num(r.connection_reused),
        r.attempts.to_string(),
        quote(r.error_kind.as_deref().unwrap_or("")),
        quote(r.error.as_deref().unwrap_or("")),
        num(r.inputs),
        num(r.audio_s),
        num(r.server_prefill_ms),
        num(r.server_tpot_ms),
        num(r.server_ttft_ms),
        num(r.server_e2e_ms),
    ];
    cells.join(",")
}

/// Write the run's records as CSV to `out`, streaming: one record in memory at a time; the
/// number of rows.
pub fn csv(run: &RunDir, out: &Path) -> Result<usize, ReportError> {
    use std::io::Write;
    let werr = |source| ReportError::Write { path: out.display().to_string(), source };
    let f = std::fs::File::create(out).map_err(werr)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
    w.write_all((CSV_COLUMNS.join(",") + "\n").as_bytes()).map_err(werr)?;
    let (mut n, mut err) = (0usize, None);
    run.for_each_record(|r| {
        if err.is_none() {
            let mut row = csv_row(&r);
            row.push('\n');
            err = w.write_all(row.as_bytes()).err();
            n += 1;
        }
    })?;
    if let Some(e) = err {
        return Err(werr(e));
    }
    w.flush().map_err(werr)?;
    Ok(n)
}

/// Rows per Parquet row group of an export: the records of one group are all that memory
/// holds (about 90 MB for 128-token streams).
pub const PARQUET_ROW_GROUP: usize = 65_536;

/// Write the run's records as Parquet (Snappy) to `out`, one row group of
/// [`PARQUET_ROW_GROUP`] records at a time as they are read; the number of rows.
pub fn parquet(run: &RunDir, out: &Path) -> Result<usize, ReportError> {
    parquet_in_groups(run, out, PARQUET_ROW_GROUP)
}

/// [`parquet`] with row groups of `rows` records.
pub fn parquet_in_groups(run: &RunDir, out: &Path, rows: usize) -> Result<usize, ReportError> {
    let f = std::fs::File::create(out)
        .map_err(|source| ReportError::Write { path: out.display().to_string(), source })?;
    let mut pw = crate::parquet::Writer::new(std::io::BufWriter::with_capacity(1 << 16, f))?;
    let rows = rows.max(1);
    let mut group = Vec::with_capacity(rows.min(PARQUET_ROW_GROUP));
    let (mut n, mut err) = (0usize, None);
    run.for_each_record(|r| {
        if err.is_some() {
            return;
        }
        group.push(r);
        n += 1;
        if group.len() == rows {
            err = pw.row_group(&group).err();
            group.clear();
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    if !group.is_empty() || n == 0 {
        pw.row_group(&group)?;
    }
    pw.finish()?;
    Ok(n)
}

/// The result JSON `vllm bench serve --save-result --save-detailed` writes: its field names,
/// Quetta's values (per-request lists in request order; failed requests have 0 for their
/// TTFT and no ITLs, as vLLM writes them). Times in seconds in the lists, ms in the stats.
///
/// ```no_run
/// let d = quetta_report::RunDir::open("results/run-1")?;
/// let v = quetta_report::export::vllm(&d)?;
/// d.write_vllm(&v, &d.file(quetta_report::files::VLLM))?;
/// # Ok::<(), quetta_report::ReportError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VllmResult {
    /// `YYYYMMDD-HHMMSS`, as vLLM names its result files.
    pub date: String,
    pub backend: String,
    pub model_id: String,
    pub tokenizer_id: Option<String>,
    pub num_prompts: usize,
    /// Requests/s, or `"inf"` for a closed loop (as vLLM writes it).
    pub request_rate: VllmRate,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    pub duration: f64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub input_lens: Vec<u64>,
    pub output_lens: Vec<u64>,
    pub ttfts: Vec<f64>,
    pub itls: Vec<Vec<f64>>,
    pub generated_texts: Vec<String>,
    pub errors: Vec<String>,
    pub mean_ttft_ms: Option<f64>,
    pub median_ttft_ms: Option<f64>,
    pub std_ttft_ms: Option<f64>,
    pub p99_ttft_ms: Option<f64>,
    pub mean_tpot_ms: Option<f64>,
    pub median_tpot_ms: Option<f64>,
    pub std_tpot_ms: Option<f64>,
    pub p99_tpot_ms: Option<f64>,
    pub mean_itl_ms: Option<f64>,
    pub median_itl_ms: Option<f64>,
    pub std_itl_ms: Option<f64>,
    pub p99_itl_ms: Option<f64>,
    pub mean_e2el_ms: Option<f64>,
    pub median_e2el_ms: Option<f64>,
    pub std_e2el_ms: Option<f64>,
    pub p99_e2el_ms: Option<f64>,
    /// The API called, as vLLM names it (`openai-chat` or `openai`, the completions API).
    pub endpoint_type: String,
    /// The run's `--label` (vLLM: the backend's name when none was given).
    pub label: Option<String>,
    /// Per request, end-to-end latency in seconds (0 for a failed request).
    pub latencies: Vec<f64>,
    /// Per request, the time it waited for a concurrency slot, in seconds.
    pub queue_times: Vec<f64>,
    /// Per request, the send time in seconds from the start of the measured phase.
    pub start_times: Vec<f64>,
    /// The most requests in flight at once (from the records' send and end times).
    pub max_concurrent_requests: u64,
    /// The most output tokens in one second of the run (token-bearing chunks, from each
    /// request's first-token time and inter-token gaps).
    pub max_output_tokens_per_s: f64,
    /// Real-time factor of audio transcription: 0 for text generation.
    pub rtfx: f64,
    /// Percentiles besides p99, named as vLLM names them (`p25_ttft_ms`, `p99.9_itl_ms`; of
    /// ttft, tpot, itl and e2el): p50, p90, p95, p99.9 and those asked for with
    /// `--metric-percentiles` (`--percentiles`).
    #[serde(flatten)]
    pub percentiles: std::collections::BTreeMap<String, Option<f64>>,
    /// Embeddings and rankings (vLLM's pooling backends): the inputs of the completed
    /// requests, and inputs per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_input_sequences: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sequence_throughput: Option<f64>,
}

impl VllmResult {
    /// The name `vllm bench serve --save-result` gives this file:
    /// `BACKEND-RATEqps[-concurrencyN]-MODEL-DATE.json` (the model's last path segment).
    pub fn file_name(&self) -> String {
        let rate = match &self.request_rate {
            VllmRate::Rate(r) => r.to_string(),
            VllmRate::Unbounded(s) => s.clone(),
        };
        let conc = self.max_concurrency.map_or(String::new(), |c| format!("-concurrency{c}"));
        let model = self.model_id.rsplit('/').next().unwrap_or("model");
        format!("{}-{rate}qps{conc}-{model}-{}.json", self.backend, self.date)
    }
}

/// `p25_ttft_ms`, `p99.9_e2el_ms`, ... of the extra percentiles of each metric.
fn vllm_percentiles(
    m: &quetta_metrics::MetricsSummary,
) -> std::collections::BTreeMap<String, Option<f64>> {
    let mut out = std::collections::BTreeMap::new();
    for (name, st) in
        [("ttft", &m.ttft_ms), ("tpot", &m.tpot_ms), ("itl", &m.itl_ms), ("e2el", &m.e2e_ms)]
    {
        let standard = [("50", st.p50), ("90", st.p90), ("95", st.p95), ("99.9", st.p999)];
        for (p, v) in standard {
            out.insert(format!("p{p}_{name}_ms"), v);
        }
        for (k, v) in &st.extra {
            // quetta's p99_99 is vLLM's p99.99
            let p = k.trim_start_matches('p').replace('_', ".");
            out.insert(format!("p{p}_{name}_ms"), *v);
        }
    }
    out
}

/// Microseconds of a millisecond value of a record (kept to the microsecond).
fn us(ms: f64) -> i64 {
    (ms * 1e3).round() as i64
}

/// vLLM's two peaks, by its own definitions (`vllm bench serve`): over completed requests,
/// in seconds counted from the earliest send of one, `max_concurrent_requests` is the most
/// requests active during one such second (a request counts in every second from its
/// send's to its end's) and `max_output_tokens_per_s` the most tokens (token-bearing
/// chunks: the first at TTFT, then one per gap) arriving in one. Memory: two counters per
/// second of the run, whatever the number of requests.
#[derive(Debug, Default)]
struct VllmPeaks {
    origin_us: i64,
    active: Vec<u64>,
    tokens: Vec<u64>,
}

/// A completed request's send, in microseconds (what vLLM's peaks count from).
fn vllm_send_us(r: &RequestRecord) -> Option<i64> {
    r.sent_offset_ms.filter(|_| r.ok() && r.e2e_ms.is_some()).map(us)
}

fn bump_second(v: &mut Vec<u64>, k: usize) -> &mut u64 {
    if v.len() <= k {
        v.resize(k + 1, 0);
    }
    &mut v[k]
}

impl VllmPeaks {
    fn new(origin_us: i64) -> Self {
        Self { origin_us, ..Self::default() }
    }

    fn second(&self, t_us: i64) -> usize {
        usize::try_from((t_us - self.origin_us).max(0) / 1_000_000).unwrap_or(0)
    }

    fn add(&mut self, r: &RequestRecord) {
        let Some(sent) = vllm_send_us(r) else { return };
        let end = sent + us(r.e2e_ms.unwrap_or(0.0));
        let (a, b) = (self.second(sent), self.second(end));
        bump_second(&mut self.active, b);
        for c in &mut self.active[a..=b] {
            *c += 1;
        }
        let mut t = sent + us(r.ttft_ms.unwrap_or(0.0));
        let k = self.second(t);
        *bump_second(&mut self.tokens, k) += 1;
        for &g in &r.itl_us {
            t += i64::from(g);
            let k = self.second(t);
            *bump_second(&mut self.tokens, k) += 1;
        }
    }

    /// (`max_concurrent_requests`, `max_output_tokens_per_s`).
    fn finish(&self) -> (u64, f64) {
        let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        (max(&self.active), max(&self.tokens) as f64)
    }
}

/// One request's entries in vLLM's per-request lists, in [`VLLM_LISTS`] order.
struct VllmRow {
    input_len: u64,
    output_len: u64,
    ttft: f64,
    itl: Vec<f64>,
    text: String,
    error: String,
    latency: f64,
    queue: f64,
    start: f64,
}

/// JSON text of a value, as `serde_json` writes it (compact).
fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl VllmRow {
    /// Failed requests have 0 for their output length, TTFT and latency and no gaps, as vLLM
    /// writes them; times in seconds.
    fn of(r: &RequestRecord) -> Self {
        let ok = r.ok();
        Self {
            input_len: r.input_tokens.unwrap_or(0),
            output_len: if ok { r.output_tokens.unwrap_or(0) } else { 0 },
            ttft: if ok { r.ttft_ms.unwrap_or(0.0) / 1e3 } else { 0.0 },
            itl: if ok { r.itl_ms().map(|g| g / 1e3).collect() } else { Vec::new() },
            text: r.text.clone().unwrap_or_default(),
            error: r.error.clone().unwrap_or_default(),
            latency: if ok { r.e2e_ms.unwrap_or(0.0) / 1e3 } else { 0.0 },
            queue: r.queue_ms / 1e3,
            start: r.sent_offset_ms.unwrap_or(r.started_offset_ms) / 1e3,
        }
    }

    fn push(self, v: &mut VllmResult) {
        v.input_lens.push(self.input_len);
        v.output_lens.push(self.output_len);
        v.ttfts.push(self.ttft);
        v.itls.push(self.itl);
        v.generated_texts.push(self.text);
        v.errors.push(self.error);
        v.latencies.push(self.latency);
        v.queue_times.push(self.queue);
        v.start_times.push(self.start);
    }

    /// Each entry as JSON text, in [`VLLM_LISTS`] order.
    fn json(&self) -> [String; 9] {
        [
            json_text(&self.input_len),
            json_text(&self.output_len),
            json_text(&self.ttft),
            json_text(&self.itl),
            json_text(&self.text),
            json_text(&self.error),
            json_text(&self.latency),
            json_text(&self.queue),
            json_text(&self.start),
        ]
    }
}

/// vLLM's per-request lists, in the order [`VllmResult`] writes them.
const VLLM_LISTS: [&str; 9] = [
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
    "latencies",
    "queue_times",
    "start_times",
];

/// vLLM's `request_rate`: a number, or the string `"inf"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum VllmRate {
    Rate(f64),
    Unbounded(String),
}

fn stats4(s: &Stats) -> [Option<f64>; 4] {
    [s.mean, s.p50, s.stddev, s.p99]
}

/// The vLLM result JSON of a run, in memory (every record's lists at once; for a run of
/// any size, [`write_vllm`] streams the same file).
pub fn vllm(run: &RunDir) -> Result<VllmResult, ReportError> {
    let s = run.read_summary()?;
    let recs = run.read_records()?.records;
    Ok(vllm_result(&s, &recs))
}

/// The vLLM result JSON of a summary and its records.
pub fn vllm_result(s: &Summary, recs: &[RequestRecord]) -> VllmResult {
    let origin = recs.iter().filter_map(vllm_send_us).min().unwrap_or(0);
    let mut peaks = VllmPeaks::new(origin);
    for r in recs {
        peaks.add(r);
    }
    let mut v = vllm_head(s, recs.len(), peaks.finish());
    for r in recs {
        VllmRow::of(r).push(&mut v);
    }
    v
}

/// Write the vLLM result JSON of a run to `to`, streaming: two passes over requests.jsonl
/// (the earliest completed send, then the lists), each list spilled to its own file beside
/// `to` as it is read, then copied into place; memory holds one record and two counters per
/// second. The bytes are those [`crate::RunDir::write_vllm`] writes of [`vllm`] (a test
/// holds it). Returns the file's fields but its per-request lists, which stay empty.
pub fn write_vllm(run: &RunDir, to: &Path) -> Result<VllmResult, ReportError> {
    use std::io::Write;
    let s = run.read_summary()?;
    let mut origin: Option<i64> = None;
    run.for_each_record(|r| {
        if let Some(t) = vllm_send_us(&r) {
            origin = Some(origin.map_or(t, |o| o.min(t)));
        }
    })?;
    let spill = Spill::new(to);
    let mut lists = spill.writers()?;
    let mut peaks = VllmPeaks::new(origin.unwrap_or(0));
    let (mut n, mut err) = (0usize, None);
    run.for_each_record(|r| {
        peaks.add(&r);
        let sep: &[u8] = if n == 0 { b"" } else { b"," };
        for (w, text) in lists.iter_mut().zip(VllmRow::of(&r).json()) {
            if let Err(e) = w.write_all(sep).and_then(|()| w.write_all(text.as_bytes())) {
                err.get_or_insert(e);
            }
        }
        n += 1;
    })?;
    let werr = |source| ReportError::Write { path: to.display().to_string(), source };
    if let Some(e) = err {
        return Err(werr(e));
    }
    for w in &mut lists {
        w.flush().map_err(werr)?;
    }
    drop(lists);
    let head = vllm_head(&s, n, peaks.finish());
    spill.assemble(&head, to)?;
    Ok(head)
}

/// The name `vllm bench serve --save-result` gives the result file of a run
/// ([`VllmResult::file_name`]).
pub fn vllm_file_name(s: &Summary) -> String {
    vllm_head(s, 0, (0, 0.0)).file_name()
}

/// The spill files of [`write_vllm`] (`.NAME.LIST.part` beside the file), removed when
/// dropped.
struct Spill {
    paths: Vec<std::path::PathBuf>,
}

impl Spill {
    fn new(to: &Path) -> Self {
        let name = to.file_name().map_or("vllm".into(), |n| n.to_string_lossy().into_owned());
        let dir = to.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Self { paths: VLLM_LISTS.iter().map(|k| dir.join(format!(".{name}.{k}.part"))).collect() }
    }

    fn writers(&self) -> Result<Vec<std::io::BufWriter<std::fs::File>>, ReportError> {
        self.paths
            .iter()
            .map(|p| {
                std::fs::File::create(p)
                    .map(|f| std::io::BufWriter::with_capacity(1 << 16, f))
                    .map_err(|source| ReportError::Write { path: p.display().to_string(), source })
            })
            .collect()
    }

    /// `head` as JSON with each empty list replaced by its spill file's entries.
    fn assemble(&self, head: &VllmResult, to: &Path) -> Result<(), ReportError> {
        use std::io::Write;
        let werr = |source| ReportError::Write { path: to.display().to_string(), source };
        let text = serde_json::to_string(head).map_err(|e| ReportError::Invalid(e.to_string()))?;
        let f = std::fs::File::create(to).map_err(werr)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
        let mut at = 0;
        for (k, p) in VLLM_LISTS.iter().zip(&self.paths) {
            // the lists' keys, in order; a key inside a string is escaped (\"), so the
            // first match after the previous list is the key itself
            let marker = format!("\"{k}\":[]");
            let Some(i) = text[at..].find(&marker).map(|i| i + at) else {
                return Err(ReportError::Invalid(format!("vLLM result: no list {k} to fill")));
            };
            w.write_all(&text.as_bytes()[at..i]).map_err(werr)?;
            write!(w, "\"{k}\":[").map_err(werr)?;
            let mut f = std::fs::File::open(p)
                .map_err(|source| ReportError::Read { path: p.display().to_string(), source })?;
            std::io::copy(&mut f, &mut w).map_err(werr)?;
            w.write_all(b"]").map_err(werr)?;
            at = i + marker.len();
        }
        w.write_all(&text.as_bytes()[at..]).map_err(werr)?;
        w.write_all(b"\n").map_err(werr)?;
        w.flush().map_err(werr)
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A vLLM result of `n` requests with its lists empty and the given peaks.
fn vllm_head(s: &Summary, n: usize, (peak, tokens_per_s): (u64, f64)) -> VllmResult {
    let m = &s.metrics;
    let [mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms] = stats4(&m.ttft_ms);
    let [mean_tpot_ms, median_tpot_ms, std_tpot_ms, p99_tpot_ms] = stats4(&m.tpot_ms);
    let [mean_itl_ms, median_itl_ms, std_itl_ms, p99_itl_ms] = stats4(&m.itl_ms);
    let [mean_e2el_ms, median_e2el_ms, std_e2el_ms, p99_e2el_ms] = stats4(&m.e2e_ms);
    let c = &s.config;
    VllmResult {
        date: s
            .started_at
            .replace(['-', ':'], "")
            .replace('T', "-")
            .trim_end_matches('Z')
            .to_owned(),
        backend: vllm_backend(s).into(),
        model_id: s.target.model.clone(),
        tokenizer_id: c.tokenizer.clone(),
        num_prompts: n,
        request_rate: c
            .request_rate
            .map_or_else(|| VllmRate::Unbounded("inf".into()), VllmRate::Rate),
        burstiness: c.burstiness.unwrap_or(1.0),
        max_concurrency: c.max_concurrency.or(c.concurrency),
        duration: m.duration_s,
        completed: m.completed,
        failed: m.failed,
        total_input_tokens: m.total_input_tokens,
        total_output_tokens: m.total_output_tokens,
        request_throughput: m.request_throughput,
        request_goodput: m.goodput.as_ref().map(|g| g.request_rate),
        output_throughput: m.output_token_throughput,
        total_token_throughput: m.total_token_throughput,
        input_lens: Vec::new(),
        output_lens: Vec::new(),
        ttfts: Vec::new(),
        itls: Vec::new(),
        generated_texts: Vec::new(),
        errors: Vec::new(),
        mean_ttft_ms,
        median_ttft_ms,
        std_ttft_ms,
        p99_ttft_ms,
        mean_tpot_ms,
        median_tpot_ms,
        std_tpot_ms,
        p99_tpot_ms,
        mean_itl_ms,
        median_itl_ms,
        std_itl_ms,
        p99_itl_ms,
        mean_e2el_ms,
        median_e2el_ms,
        std_e2el_ms,
        p99_e2el_ms,
        endpoint_type: vllm_backend(s).into(),
        label: c.label.clone(),
        latencies: Vec::new(),
        queue_times: Vec::new(),
        start_times: Vec::new(),
        max_concurrent_requests: peak,
        max_output_tokens_per_s: tokens_per_s,
        rtfx: m.rtfx,
        percentiles: vllm_percentiles(m),
        total_input_sequences: (!s.target.kind.generates()).then_some(m.total_inputs),
        input_sequence_throughput: (!s.target.kind.generates()).then_some(m.input_throughput),
    }
}

/// vLLM's name of the backend a run used: OpenAI's chat or completions API, or the
/// protocol's own name (`openai-responses`, `openai-embeddings`, ... are vLLM's names).
fn vllm_backend(s: &Summary) -> &str {
    match s.config.endpoint.as_str() {
        "completions" => "openai",
        "chat" => "openai-chat",
        _ => &s.target.backend,
    }
}
