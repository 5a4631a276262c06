//! Live-server probes over the engine trait. Each returns a [`ProbeOutput`] (CSV rows and
//! a JSON summary); [`write`] puts `<probe>.csv` and `<probe>.meta.json` (schema version,
//! probe, parameters, server, model, tool version, time, host, summary) in a directory.
//!
//! Prompts are words from the bundled corpus, each prompt unique from its first word
//! unless a probe shares a prefix on purpose; token counts come from the server's `usage`
//! where it reports them.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use quetta_engine::{Engine, EngineRequest, Message, Prompt};
use quetta_loadgen::execute;
use quetta_metrics::Observation;

/// The meta.json schema version (also `meta::META_SCHEMA_VERSION`).
pub use crate::meta::META_SCHEMA_VERSION;
use crate::meta::{
    finite, DecodeGridParameters, DecodeGridSummary, Findings, GridCell, HerdParameters,
    HerdSummary, KvCapacityParameters, KvCapacitySummary, MetaHost, MetaServer, ProbeMeta,
    StageSplitParameters, StageSplitSummary, StageTimes, TtftFit, TtftParameters, TtftSummary,
};

use crate::scrape::scrape_once;
use crate::server;

/// What every probe needs.
#[derive(Clone)]
pub struct ProbeContext {
    pub engine: Arc<dyn Engine>,
    /// Chat messages (true) or a raw prompt (false).
    pub chat: bool,
    pub base_url: String,
    pub model: String,
    /// The server's Prometheus endpoint, for probes that compare with the server's view.
    pub metrics_url: Option<String>,
    pub seed: u64,
    /// The program running the probes, named in every `meta.json`.
    pub tool: quetta_engine::tool::Tool,
}

impl std::fmt::Debug for ProbeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeContext")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A probe's results: its CSV (header and rows) and what its meta.json says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOutput {
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
    pub findings: Findings,
}

impl ProbeOutput {
    /// The probe's name: its files are `<probe>.csv` and `<probe>.meta.json`.
    pub fn probe(&self) -> &'static str {
        self.findings.probe()
    }
}

/// A probe could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    #[error("invalid parameter: {0}")]
    Invalid(String),
    #[error("request failed: {0}")]
    Request(String),
    #[error("cannot write {path}: {reason}")]
    Write { path: String, reason: String },
}

/// splitmix64.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` words: a unique first word (the seed spelled in hex), then corpus words.
pub fn words(n: u32, seed: u64) -> String {
    static WORDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let w = WORDS.get_or_init(|| quetta_workload::tokenizer::CORPUS.split_whitespace().collect());
    let mut out = String::with_capacity(n as usize * 7);
    let mut s = seed;
    for i in 0..n {
        if i == 0 {
            out.push_str(&format!("{:x}", mix(seed)).chars().rev().collect::<String>());
            continue;
        }
        s = mix(s);
        out.push(' ');
        out.push_str(w[(s % w.len() as u64) as usize]);
    }
    out
}

impl ProbeContext {
    fn request(&self, id: u64, text: String, max_tokens: u32) -> EngineRequest {
        let prompt = if self.chat {
            Prompt::Chat(vec![Message::text("user", text)])
        } else {
            Prompt::Text(text)
        };
        let mut r = EngineRequest::new(id, prompt);
        r.max_tokens = Some(max_tokens);
        r.ignore_eos = true;
        // greedy decoding, shared by every probe request
        static GREEDY: std::sync::OnceLock<Arc<quetta_engine::RequestParams>> =
            std::sync::OnceLock::new();
        r.params = GREEDY
            .get_or_init(|| {
                let mut p = quetta_engine::RequestParams::default();
                p.sampling.temperature = Some(0.0);
                Arc::new(p)
            })
            .clone();
        r
    }

    /// Send one request and return its observation; a failure is an error.
    pub(crate) async fn send(
        &self,
        id: u64,
        text: String,
        max_tokens: u32,
        t0: Instant,
    ) -> Result<Observation, ProbeError> {
        let n = text.split_whitespace().count() as u32;
        let now = Instant::now();
        let o = execute(self.engine.as_ref(), self.request(id, text, max_tokens), n, now, now, t0)
            .await;
        match &o.error {
            Some(e) => Err(ProbeError::Request(format!("request {id}: {e}"))),
            None => Ok(o),
        }
    }
}

fn ms(d: Option<std::time::Duration>, from: Option<std::time::Duration>) -> Option<f64> {
    Some(d?.saturating_sub(from?).as_secs_f64() * 1e3)
}

pub(crate) fn ttft_ms(o: &Observation) -> Option<f64> {
    ms(o.first_token, o.sent)
}

/// The mean of `v` (`None` when empty).
pub(crate) fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The one median of the workspace (`quetta-metrics`).
pub(crate) use quetta_metrics::stats::median;

pub(crate) fn f(v: f64) -> String {
    format!("{v:.3}")
}

/// Least squares of `y` on the columns of `x` (with an intercept first); returns the
/// coefficients and R². `None` when the system is singular.
pub fn ols(x: &[Vec<f64>], y: &[f64]) -> Option<(Vec<f64>, f64)> {
    let rows: Vec<Vec<f64>> =
        x.iter().map(|r| std::iter::once(1.0).chain(r.iter().copied()).collect()).collect();
    let beta = lstsq(&rows, y)?;
    Some((beta.clone(), r_squared(&rows, y, &beta)))
}

/// R² of `y` against `rows · beta`.
pub fn r_squared(rows: &[Vec<f64>], y: &[f64], beta: &[f64]) -> f64 {
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    let (mut ss_res, mut ss_tot) = (0.0, 0.0);
    for (row, &yi) in rows.iter().zip(y) {
        let fit: f64 = row.iter().zip(beta).map(|(v, b)| v * b).sum();
        ss_res += (yi - fit).powi(2);
        ss_tot += (yi - mean).powi(2);
    }
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        1.0
    }
}

/// Least squares of `y` on exactly the columns of `rows` (no intercept added). `None` when
/// the system is singular.
pub fn lstsq(rows: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = rows.first()?.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (r, &yi) in rows.iter().zip(y) {
        for i in 0..k {
            for j in 0..k {
                a[i][j] += r[i] * r[j];
            }
            a[i][k] += r[i] * yi;
        }
    }
    // Gauss-Jordan with partial pivoting.
    for c in 0..k {
        let p = (c..k).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, p);
        let pv = a[c][c];
        for v in &mut a[c] {
            *v /= pv;
        }
        for i in 0..k {
            if i != c {
                let m = a[i][c];
                let rowc = a[c].clone();
                for (v, rc) in a[i].iter_mut().zip(rowc) {
                    *v -= m * rc;
                }
            }
        }
    }
    Some(a.iter().map(|r| r[k]).collect())
}

/// `ttft`: TTFT against new and cached prompt tokens. For every (cached, new) pair and
/// repeat, a prefix of `cached` words is sent once (so the server caches it), then the
/// prefix followed by `new` fresh words; TTFT is fitted as floor + a·new + b·cached, where
/// new and cached are the server's counts (`usage`) when it reports them.
pub async fn ttft(
    ctx: &ProbeContext,
    new_tokens: &[u32],
    cached_tokens: &[u32],
    repeats: u32,
) -> Result<ProbeOutput, ProbeError> {
    if new_tokens.is_empty() || cached_tokens.is_empty() || repeats == 0 {
        return Err(ProbeError::Invalid(
            "give new and cached token counts and at least one repeat".into(),
        ));
    }
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let mut id = 0;
    let mut reported_cache = false;
    for &c in cached_tokens {
        for &n in new_tokens {
            for rep in 0..repeats {
                let seed = ctx.seed ^ mix(u64::from(c) << 40 | u64::from(n) << 8 | u64::from(rep));
                let prefix = words(c, seed);
                if c > 0 {
                    ctx.send(id, prefix.clone(), 1, t0).await?;
                    id += 1;
                }
                let tail = words(n, seed ^ 0xABCD);
                let text = if c > 0 { format!("{prefix} {tail}") } else { tail };
                let o = ctx.send(id, text, 1, t0).await?;
                id += 1;
                let t = ttft_ms(&o).unwrap_or(f64::NAN);
                let u = o.usage.unwrap_or_default();
                let prompt = u.prompt_tokens.unwrap_or(u64::from(c + n)) as f64;
                let cached = match u.cached_tokens {
                    Some(k) => {
                        reported_cache = true;
                        k as f64
                    }
                    None => f64::from(c),
                };
                let new = prompt - cached;
                xs.push(vec![new, cached]);
                ys.push(t);
                rows.push(vec![
                    c.to_string(),
                    n.to_string(),
                    rep.to_string(),
                    f(prompt),
                    f(cached),
                    f(new),
                    f(t),
                ]);
            }
        }
    }
    let fit = ols(&xs, &ys);
    let summary = match &fit {
        Some((b, r2)) => TtftSummary::Fit(TtftFit {
            model: "ttft_ms = floor_ms + per_new_token_ms * new + per_cached_token_ms * cached"
                .into(),
            floor_ms: b[0],
            per_new_token_ms: b[1],
            per_cached_token_ms: b[2],
            r2: *r2,
            samples: ys.len(),
            cached_tokens_from: if reported_cache {
                "usage"
            } else {
                "planned (the server reported none)"
            }
            .into(),
        }),
        None => TtftSummary::Failed {
            error: "the fit is singular: vary both new and cached tokens".into(),
        },
    };
    let parameters = TtftParameters {
        new_tokens: new_tokens.to_vec(),
        cached_tokens: cached_tokens.to_vec(),
        repeats,
    };
    Ok(ProbeOutput {
        header: vec![
            "cached_planned",
            "new_planned",
            "repeat",
            "prompt_tokens",
            "cached_tokens",
            "new_tokens",
            "ttft_ms",
        ],
        rows,
        findings: Findings::Ttft { parameters, summary },
    })
}

/// Token arrival times of an observation (offsets in ms): the first token, then each gap.
pub(crate) fn token_times(o: &Observation) -> Vec<f64> {
    let Some(first) = o.first_token else { return Vec::new() };
    let mut t = first.as_secs_f64() * 1e3;
    let mut v = vec![t];
    for g in &o.itl_us {
        t += f64::from(*g) / 1e3;
        v.push(t);
    }
    v
}

/// The gaps of streams run together, inside the window where every one of them decodes
/// (from the last first token to the first end): each stream's median gap and mean gap, the
/// gaps counted, and the window (ms offsets).
pub(crate) struct Steady {
    pub(crate) per_req: Vec<f64>,
    /// Each stream's mean gap in the window: its TPOT there, hiccups included.
    pub(crate) per_req_mean: Vec<f64>,
    pub(crate) counted: usize,
    pub(crate) start: f64,
    pub(crate) end: f64,
}

pub(crate) fn steady_gaps(obs: &[Observation]) -> Steady {
    let times: Vec<Vec<f64>> = obs.iter().map(token_times).collect();
    let start = times.iter().filter_map(|t| t.first().copied()).fold(f64::MIN, f64::max);
    let end = times.iter().filter_map(|t| t.last().copied()).fold(f64::MAX, f64::min);
    let mut per_req = Vec::new();
    let mut per_req_mean = Vec::new();
    let mut counted = 0;
    for t in &times {
        let g: Vec<f64> =
            t.windows(2).filter(|w| w[0] >= start && w[1] <= end).map(|w| w[1] - w[0]).collect();
        counted += g.len();
        per_req_mean.extend(mean(&g));
        per_req.extend(median(&g));
    }
    Steady { per_req, per_req_mean, counted, start, end }
}

/// `decode-grid`: steady-state inter-token latency over batch size × context length. For
/// each cell, `batch` streams with unique prompts of `context` words and `ignore_eos` run
/// together; only gaps inside the window where every stream is decoding (from the last
/// first token to the first end) count; the cell's figure is the median of the streams'
/// median gaps.
pub async fn decode_grid(
    ctx: &ProbeContext,
    batches: &[usize],
    contexts: &[u32],
    output_tokens: u32,
) -> Result<ProbeOutput, ProbeError> {
    if batches.is_empty() || contexts.is_empty() || output_tokens < 4 || batches.contains(&0) {
        return Err(ProbeError::Invalid(
            "give batch sizes ≥ 1, context lengths and at least 4 output tokens".into(),
        ));
    }
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let mut id = 0u64;
    let mut cells = Vec::new();
    for &b in batches {
        for &c in contexts {
            let futs: Vec<_> = (0..b)
                .map(|i| {
                    let text = words(c, ctx.seed ^ mix(id + i as u64) ^ 0x5EED);
                    ctx.send(id + i as u64, text, output_tokens, t0)
                })
                .collect();
            id += b as u64;
            let mut obs = Vec::new();
            for r in join_all(futs).await {
                obs.push(r?);
            }
            let Steady { per_req, counted, start, end, .. } = steady_gaps(&obs);
            let streams = per_req.len();
            let itl = median(&per_req);
            cells.push(GridCell { batch: b, context: c, itl_ms: itl });
            rows.push(vec![
                b.to_string(),
                c.to_string(),
                itl.map_or_else(String::new, f),
                streams.to_string(),
                counted.to_string(),
                f((end - start).max(0.0)),
            ]);
        }
    }
    let parameters = DecodeGridParameters {
        batches: batches.to_vec(),
        contexts: contexts.to_vec(),
        output_tokens,
    };
    Ok(ProbeOutput {
        header: vec![
            "batch",
            "context",
            "itl_ms_median",
            "streams_in_window",
            "gaps_counted",
            "window_ms",
        ],
        rows,
        findings: Findings::DecodeGrid { parameters, summary: DecodeGridSummary { cells } },
    })
}

/// Poll futures together on the current task.
pub(crate) async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut handles: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..handles.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (h, o) in handles.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match h.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}

async fn scrape(
    ctx: &ProbeContext,
) -> Option<std::collections::BTreeMap<&'static str, server::Reading>> {
    let url = ctx.metrics_url.as_deref()?;
    scrape_once(url, None).await.ok().map(|e| server::read(&e))
}

/// `herd`: `n` identical requests, their prompt cached by a first request, sent at once;
/// the client's TTFT beside the server's own (from its TTFT histogram, when it has one).
pub async fn herd(
    ctx: &ProbeContext,
    n: usize,
    prompt_tokens: u32,
    output_tokens: u32,
) -> Result<ProbeOutput, ProbeError> {
    if n == 0 || prompt_tokens == 0 || output_tokens == 0 {
        return Err(ProbeError::Invalid(
            "n, prompt tokens and output tokens must be at least 1".into(),
        ));
    }
    let t0 = Instant::now();
    let text = words(prompt_tokens, ctx.seed ^ 0x4E5D);
    ctx.send(0, text.clone(), 1, t0).await?;
    let before = scrape(ctx).await;
    let futs: Vec<_> =
        (0..n).map(|i| ctx.send(1 + i as u64, text.clone(), output_tokens, t0)).collect();
    let mut rows = Vec::new();
    let mut client = Vec::new();
    for (i, r) in join_all(futs).await.into_iter().enumerate() {
        let o = r?;
        let t = ttft_ms(&o).unwrap_or(f64::NAN);
        client.push(t);
        let cached = o.usage.and_then(|u| u.cached_tokens);
        rows.push(vec![i.to_string(), f(t), cached.map_or_else(String::new, |c| c.to_string())]);
    }
    let after = scrape(ctx).await;
    let server_ttft = match (before, after) {
        (Some(a), Some(b)) => {
            server::deltas(&a, &b, &[]).get("ttft_s").and_then(|d| d.mean).map(|s| s * 1e3)
        }
        _ => None,
    };
    // over the requests that gave a token (a row with an empty TTFT says which did not)
    client.retain(|t| t.is_finite());
    let max = client.iter().copied().fold(f64::NAN, f64::max);
    let summary = HerdSummary {
        client_ttft_mean_ms: mean(&client),
        client_ttft_p50_ms: median(&client),
        client_ttft_max_ms: finite(max),
        server_ttft_mean_ms: server_ttft,
        server_ttft_from: if server_ttft.is_some() {
            "server TTFT histogram delta".into()
        } else {
            format!(
                "not available (no {} or no TTFT histogram)",
                quetta_engine::setting::Setting::MetricsUrl
            )
        },
    };
    Ok(ProbeOutput {
        header: vec!["request", "ttft_ms", "cached_tokens"],
        rows,
        findings: Findings::Herd {
            parameters: HerdParameters { n, prompt_tokens, output_tokens },
            summary,
        },
    })
}

/// `kv-capacity`: send `prompts` distinct prompts of `prompt_tokens` words, then probe them
/// again from the newest back; a probe is a hit when the server serves at least half of the
/// prompt from cache. The run of hits before the first miss, times the prompt length, is the
/// usable KV pool (a lower bound when every probe hits).
pub async fn kv_capacity(
    ctx: &ProbeContext,
    prompts: u32,
    prompt_tokens: u32,
) -> Result<ProbeOutput, ProbeError> {
    if prompts < 2 || prompt_tokens < 16 {
        return Err(ProbeError::Invalid("at least 2 prompts of at least 16 tokens".into()));
    }
    let t0 = Instant::now();
    let texts: Vec<String> =
        (0..prompts).map(|i| words(prompt_tokens, ctx.seed ^ mix(u64::from(i) + 77))).collect();
    let mut id = 0;
    for t in &texts {
        ctx.send(id, t.clone(), 1, t0).await?;
        id += 1;
    }
    let mut rows = Vec::new();
    let mut hits = 0u32;
    let mut reported = true;
    for i in (0..prompts).rev() {
        let o = ctx.send(id, texts[i as usize].clone(), 1, t0).await?;
        id += 1;
        let Some(cached) = o.usage.and_then(|u| u.cached_tokens) else {
            reported = false;
            break;
        };
        let prompt = o.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(prompt_tokens));
        let hit = cached * 2 >= prompt;
        rows.push(vec![
            i.to_string(),
            (prompts - 1 - i).to_string(),
            prompt.to_string(),
            cached.to_string(),
            hit.to_string(),
        ]);
        if !hit {
            break;
        }
        hits += 1;
    }
    let pool = u64::from(hits) * u64::from(prompt_tokens);
    let summary = if reported {
        KvCapacitySummary::Counted {
            hits_before_first_miss: hits,
            usable_kv_tokens: pool,
            lower_bound: hits == prompts,
        }
    } else {
        KvCapacitySummary::Failed {
            error:
                "the server reports no cached tokens (usage.prompt_tokens_details.cached_tokens)"
                    .into(),
        }
    };
    Ok(ProbeOutput {
        header: vec!["prompt", "age", "prompt_tokens", "cached_tokens", "hit"],
        rows,
        findings: Findings::KvCapacity {
            parameters: KvCapacityParameters { prompts, prompt_tokens },
            summary,
        },
    })
}

/// `stage-split`: `n` requests one at a time; the deltas of the server's queue, prefill,
/// decode, TTFT and E2E metrics (`_sum`/`_count`, or llama.cpp's time counters) beside the
/// client's TTFT, decode time and E2E.
pub async fn stage_split(
    ctx: &ProbeContext,
    n: u32,
    prompt_tokens: u32,
    output_tokens: u32,
) -> Result<ProbeOutput, ProbeError> {
    let Some(url) = ctx.metrics_url.clone() else {
        return Err(ProbeError::Invalid("stage-split needs the server's metrics URL".into()));
    };
    if n == 0 || output_tokens < 2 {
        return Err(ProbeError::Invalid("n ≥ 1 and at least 2 output tokens".into()));
    }
    let t0 = Instant::now();
    let first = scrape_once(&url, None).await.map_err(|e| ProbeError::Request(e.to_string()))?;
    let kind = server::server_kind(&first);
    let a = server::read(&first);
    let (mut ttft, mut e2e) = (Vec::new(), Vec::new());
    for i in 0..n {
        let o = ctx
            .send(
                u64::from(i),
                words(prompt_tokens, ctx.seed ^ mix(u64::from(i) + 991)),
                output_tokens,
                t0,
            )
            .await?;
        ttft.push(ttft_ms(&o).unwrap_or(f64::NAN));
        e2e.push(ms(Some(o.end), o.sent).unwrap_or(f64::NAN));
    }
    let b = server::read(
        &scrape_once(&url, None).await.map_err(|e| ProbeError::Request(e.to_string()))?,
    );
    let d = server::deltas(&a, &b, &[]);
    let per_req = |k: &str| d.get(k).map(|x| x.delta / f64::from(n) * 1e3);
    let hist = |k: &str| d.get(k).and_then(|x| x.mean).map(|s| s * 1e3);
    // a request that failed makes its mean NaN: the row's client column is left empty
    let (ct, ce) = (mean(&ttft).and_then(finite), mean(&e2e).and_then(finite));
    let stages: Vec<(&str, Option<f64>, Option<f64>, &str)> = vec![
        ("queue", hist("queue_time_s"), None, "queue_time_s"),
        (
            "prefill",
            hist("prefill_time_s").or_else(|| per_req("prompt_seconds_total")),
            None,
            "prefill_time_s | prompt_seconds_total",
        ),
        ("ttft", hist("ttft_s"), ct, "ttft_s"),
        (
            "decode",
            hist("decode_time_s").or_else(|| per_req("decode_seconds_total")),
            ce.zip(ct).map(|(e, t)| e - t),
            "decode_time_s | decode_seconds_total",
        ),
        ("e2e", hist("e2e_s"), ce, "e2e_s"),
    ];
    let rows = stages
        .iter()
        .map(|(s, srv, cli, src)| {
            vec![
                (*s).to_owned(),
                srv.map_or_else(String::new, f),
                cli.map_or_else(String::new, f),
                (*src).to_owned(),
            ]
        })
        .collect();
    let stages = stages
        .iter()
        .map(|&(s, server_ms, client_ms, _)| {
            (
                s.to_owned(),
                StageTimes {
                    server_ms: server_ms.and_then(finite),
                    client_ms: client_ms.and_then(finite),
                },
            )
        })
        .collect();
    Ok(ProbeOutput {
        header: vec!["stage", "server_mean_ms", "client_mean_ms", "server_metric"],
        rows,
        findings: Findings::StageSplit {
            parameters: StageSplitParameters { n, prompt_tokens, output_tokens, metrics_url: url },
            summary: StageSplitSummary { server: kind.to_owned(), stages },
        },
    })
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Write `<probe>.csv` and `<probe>.meta.json` into `dir`; returns both paths.
pub fn write(
    out: &ProbeOutput,
    ctx: &ProbeContext,
    dir: &Path,
    server_kind: &str,
) -> Result<(std::path::PathBuf, std::path::PathBuf), ProbeError> {
    let werr = |p: &Path, e: std::io::Error| ProbeError::Write {
        path: p.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
    let csv = dir.join(format!("{}.csv", out.probe()));
    let mut text = out.header.join(",");
    text.push('\n');
    for r in &out.rows {
        text.push_str(&r.iter().map(|c| csv_cell(c)).collect::<Vec<_>>().join(","));
        text.push('\n');
    }
    std::fs::write(&csv, text).map_err(|e| werr(&csv, e))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let host =
        std::fs::read_to_string("/etc/hostname").map(|s| s.trim().to_owned()).unwrap_or_default();
    let meta = ProbeMeta {
        schema_version: META_SCHEMA_VERSION,
        findings: out.findings.clone(),
        server: MetaServer { base_url: ctx.base_url.clone(), kind: server_kind.to_owned() },
        model: ctx.model.clone(),
        tool: ctx.tool.name.clone(),
        tool_version: ctx.tool.version.clone(),
        time_unix_s: now,
        host: MetaHost {
            name: host,
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
        },
    };
    let mp = dir.join(format!("{}.meta.json", out.probe()));
    std::fs::write(&mp, serde_json::to_string_pretty(&meta).unwrap_or_default() + "\n")
        .map_err(|e| werr(&mp, e))?;
    Ok((csv, mp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ols_recovers_a_plane() {
        let x: Vec<Vec<f64>> =
            (0..20).map(|i| vec![f64::from(i), f64::from((i * 7) % 5)]).collect();
        let y: Vec<f64> = x.iter().map(|r| 3.0 + 0.5 * r[0] - 2.0 * r[1]).collect();
        let (b, r2) = ols(&x, &y).unwrap();
        assert!(
            (b[0] - 3.0).abs() < 1e-9 && (b[1] - 0.5).abs() < 1e-9 && (b[2] + 2.0).abs() < 1e-9
        );
        assert!((r2 - 1.0).abs() < 1e-12);
        assert!(ols(&[vec![1.0], vec![1.0]], &[1.0, 2.0]).is_none(), "singular");
    }

    /// A stream's slow step counts in its mean gap (what a twin's TPOT must match) and not
    /// in its median; only gaps inside the window where both streams decode count.
    #[test]
    fn steady_gaps_keep_a_slow_step_in_the_mean() {
        let stream = |first_ms: u64, gaps_us: &[u32]| Observation {
            first_token: Some(std::time::Duration::from_millis(first_ms)),
            itl_us: gaps_us.to_vec(),
            ..Default::default()
        };
        // tokens at 0, 10, 20, 30, 70, 80, 90 ms; the other stream from 10 to 95 ms
        let a = stream(0, &[10_000, 10_000, 10_000, 40_000, 10_000, 10_000]);
        let b = stream(10, &[85_000]);
        let s = steady_gaps(&[a, b]);
        assert_eq!((s.start, s.end), (10.0, 90.0));
        // a's gaps inside [10, 90]: 10, 10, 40, 10, 10 ms; b's one gap ends at 95, outside
        assert_eq!(s.per_req, vec![10.0]);
        assert_eq!(s.per_req_mean, vec![16.0]);
        assert_eq!(s.counted, 5);
    }

    #[test]
    fn words_are_unique_from_the_first_word_and_exact_in_count() {
        let a = words(50, 1);
        let b = words(50, 2);
        assert_eq!(a.split_whitespace().count(), 50);
        assert_ne!(a.split_whitespace().next(), b.split_whitespace().next());
        assert_eq!(words(50, 1), a);
    }
}
