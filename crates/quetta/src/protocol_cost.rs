//! What a protocol costs: the same server asked the same way through each of its
//! generation protocols, alternately, and each protocol's TTFT, TPOT and E2E beside the
//! others' and beside the server's own timing of the same requests.
//!
//! Round `k` sends one request through every protocol in turn, one at a time, so no
//! protocol meets a busier server or a warmer machine than another. Every request's prompt
//! is unique (random tokens, as stress mode makes them), so no protocol finds its prompt in
//! the server's prefix cache because another protocol sent it before; every prompt of a
//! round has the same length, and every request generates exactly the asked length where
//! the protocol can force it. A protocol that takes messages sends the prompt as one user
//! message (the server applies its chat template); the others send it as raw text.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use quetta_engine::setting::Setting;
use quetta_engine::{EngineRequest, Prompt, RequestKind, RequestParams};
use quetta_metrics::{Aggregate, RequestRecord, ServerTimingSummary, Stats};
use quetta_workload::spec::Limits;
use quetta_workload::spec::WorkloadSpec;
use quetta_workload::Workload;
use serde::{Deserialize, Serialize};

use crate::{Error, Protocol, Result, Target};

/// The comparison to run: `target`'s server through each of `protocols`.
#[derive(Debug, Clone)]
pub struct ProtocolCost {
    /// The server (its base URL, key, model, TLS; its protocol is replaced by each of
    /// `protocols` in turn).
    pub target: Target,
    /// Generation protocols, the first the baseline the others are compared with.
    pub protocols: Vec<Protocol>,
    /// Rounds: requests per protocol.
    pub rounds: u64,
    /// Prompt length (tokens with a tokenizer, else words) and output length.
    pub input_len: u32,
    pub output_len: u32,
    /// A tokenizer for prompts of exact token lengths.
    pub tokenizer: Option<String>,
    pub seed: u64,
}

impl ProtocolCost {
    /// Every generation protocol llama.cpp serves, 20 rounds of 128-token prompts and
    /// 32-token outputs.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            protocols: vec![
                Protocol::Chat,
                Protocol::Completions,
                Protocol::Responses,
                Protocol::Messages,
                Protocol::LlamaCpp,
            ],
            rounds: 20,
            input_len: 128,
            output_len: 32,
            tokenizer: None,
            seed: 0,
        }
    }

    /// Run the rounds and report each protocol.
    pub async fn run(&self) -> Result<ProtocolCostReport> {
        if self.protocols.is_empty() {
            return Err(Error::missing(Setting::Protocols, "protocol cost needs a protocol"));
        }
        if self.rounds == 0 {
            return Err(Error::invalid(Setting::Rounds, "give at least one round"));
        }
        if let Some(p) = self.protocols.iter().find(|p| p.kind() != RequestKind::Generate) {
            return Err(Error::invalid(
                Setting::Protocols,
                format!("protocol cost compares generation protocols; {p} is not one"),
            ));
        }
        let mut engines = Vec::with_capacity(self.protocols.len());
        for p in &self.protocols {
            let c = self.target.clone().protocol(*p).connect().await?;
            engines.push((*p, c));
        }
        let n = self.protocols.len() as u64;
        let spec = WorkloadSpec {
            input_len: Some(self.input_len),
            output_len: Some(self.output_len),
            tokenizer: self.tokenizer.clone(),
            stress: true,
            chat: true,
            seed: self.seed,
            ..WorkloadSpec::default()
        };
        let limits = Limits { requests: Some(self.rounds * n), ..Limits::default() };
        let mut built = spec.build(&limits)?;
        let work = built
            .requests()
            .ok_or(Error::Internal("a synthetic workload built no request workload"))?;
        let mut aggs: Vec<Aggregate> =
            self.protocols.iter().map(|_| Aggregate::new(None)).collect();
        let params = Arc::new(RequestParams::default());
        let start = Instant::now();
        for k in 0..self.rounds {
            for (j, (p, c)) in engines.iter().enumerate() {
                let index = k * n + j as u64;
                let planned = work
                    .request(index)
                    .ok_or(Error::Internal("a synthetic workload ended before its limit"))?;
                let req = request(*p, planned.prompt, index, self.output_len, &params);
                let now = Instant::now();
                let o = quetta_loadgen::execute(
                    c.engine.as_ref(),
                    req,
                    planned.input_tokens,
                    now,
                    now,
                    start,
                )
                .await;
                aggs[j].add(&RequestRecord::from_observation(o));
            }
        }
        let rows = engines.iter().zip(&aggs).map(|((p, _), a)| ProtocolRow::of(*p, a)).collect();
        Ok(ProtocolCostReport { rounds: self.rounds, rows })
    }
}

/// One request of a round: the prompt as the protocol takes it, the asked length forced
/// where the protocol can force it.
fn request(
    p: Protocol,
    prompt: Prompt,
    id: u64,
    output: u32,
    params: &Arc<RequestParams>,
) -> EngineRequest {
    let prompt = match prompt {
        Prompt::Chat(m) if !p.takes_messages() => Prompt::Text(
            m.iter().map(quetta_engine::Message::text_content).collect::<Vec<_>>().join("\n"),
        ),
        other => other,
    };
    let mut req = EngineRequest::new(id, prompt).with_params(params.clone());
    req.max_tokens = Some(output);
    if p.forces_lengths() {
        req.ignore_eos = true;
        req.min_tokens = Some(output);
    }
    req
}

/// One protocol's figures over its rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolRow {
    /// The protocol's name (`openai-chat`, `anthropic`, ...).
    pub protocol: String,
    pub completed: u64,
    pub failed: u64,
    /// Mean prompt tokens per request as the server counted them (its template included).
    pub input_tokens_mean: Option<f64>,
    /// Mean output tokens per request.
    pub output_tokens_mean: Option<f64>,
    pub ttft_ms: Stats,
    pub tpot_ms: Stats,
    pub e2e_ms: Stats,
    /// The server's own timing of the same requests, where the protocol carries it.
    pub server_timing: Option<ServerTimingSummary>,
    /// The most frequent error, in the server's words.
    pub top_error: Option<String>,
}

impl ProtocolRow {
    fn of(p: Protocol, a: &Aggregate) -> Self {
        let m = a.summary(&[]);
        let per = |total: u64| (m.completed > 0).then(|| total as f64 / m.completed as f64);
        Self {
            protocol: p.name().to_owned(),
            completed: m.completed,
            failed: m.failed,
            input_tokens_mean: per(m.total_input_tokens),
            output_tokens_mean: per(m.total_output_tokens),
            ttft_ms: m.ttft_ms.clone(),
            tpot_ms: m.tpot_ms.clone(),
            e2e_ms: m.e2e_ms.clone(),
            server_timing: m.server_timing.clone(),
            top_error: m.top_errors.first().map(|e| format!("{}: {}", e.kind, e.message)),
        }
    }
}

/// The comparison: one row per protocol, the first the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolCostReport {
    pub rounds: u64,
    pub rows: Vec<ProtocolRow>,
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

fn delta(v: Option<f64>, base: Option<f64>) -> String {
    match (v, base) {
        (Some(v), Some(b)) => format!("{:+.2}", v - b),
        _ => "-".into(),
    }
}

impl ProtocolCostReport {
    /// The table, then what each difference from the baseline is made of, in words.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<20}{:>5}{:>5}{:>8}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "protocol (ms)",
            "ok",
            "fail",
            "in tok",
            "TTFT p50",
            "srv pre",
            "TTFT-srv",
            "TPOT p50",
            "srv tok",
            "E2E p50",
            "dTTFT",
            "dE2E"
        );
        let base = self.rows.first();
        for r in &self.rows {
            let st = r.server_timing.as_ref();
            let _ = writeln!(
                s,
                "{:<20}{:>5}{:>5}{:>8}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
                r.protocol,
                r.completed,
                r.failed,
                r.input_tokens_mean.map_or("-".into(), |v| format!("{v:.1}")),
                cell(r.ttft_ms.p50),
                cell(st.and_then(|t| t.server_prefill_ms_mean)),
                cell(st.and_then(|t| t.ttft_minus_server_prefill_ms_mean)),
                cell(r.tpot_ms.p50),
                cell(st.and_then(|t| t.server_tpot_ms_mean)),
                cell(r.e2e_ms.p50),
                delta(r.ttft_ms.p50, base.and_then(|b| b.ttft_ms.p50)),
                delta(r.e2e_ms.p50, base.and_then(|b| b.e2e_ms.p50)),
            );
        }
        let _ = writeln!(s, "\nsrv pre: the server's own prompt time (mean); TTFT-srv: TTFT minus it (mean): the protocol's framing, the network and the client; srv tok: the server's own time per token; dTTFT, dE2E: p50 minus the first row's.");
        for line in self.explain() {
            let _ = writeln!(s, "- {line}");
        }
        s
    }

    /// Each row's difference from the first, in words: the prompt tokens the server
    /// counted (a chat template, or none), the server's own time, what is left.
    pub fn explain(&self) -> Vec<String> {
        let Some(base) = self.rows.first() else { return Vec::new() };
        let mut out = Vec::new();
        for r in &self.rows {
            if let Some(e) = &r.top_error {
                out.push(format!(
                    "{}: {} of {} failed; most often {e}",
                    r.protocol,
                    r.failed,
                    r.failed + r.completed
                ));
            }
        }
        for r in self.rows.iter().skip(1) {
            let mut why = Vec::new();
            if let (Some(a), Some(b)) = (r.input_tokens_mean, base.input_tokens_mean) {
                if (a - b).abs() >= 0.5 {
                    why.push(format!("the server counted {:+.1} prompt tokens per request (its chat template, or none)", a - b));
                }
            }
            let pre =
                |x: &ProtocolRow| x.server_timing.as_ref().and_then(|t| t.server_prefill_ms_mean);
            let over = |x: &ProtocolRow| {
                x.server_timing.as_ref().and_then(|t| t.ttft_minus_server_prefill_ms_mean)
            };
            match (pre(r), pre(base)) {
                (Some(a), Some(b)) => {
                    why.push(format!("the server's own prompt time differs by {:+.2} ms", a - b));
                }
                (None, _) => why.push("this protocol carries no server timing".into()),
                _ => {}
            }
            if let (Some(a), Some(b)) = (over(r), over(base)) {
                why.push(format!("TTFT beyond the server's prompt time differs by {:+.2} ms (framing, events before the first token)", a - b));
            }
            out.push(format!(
                "{} against {}: TTFT p50 {}, E2E p50 {} ms; {}",
                r.protocol,
                base.protocol,
                delta(r.ttft_ms.p50, base.ttft_ms.p50),
                delta(r.e2e_ms.p50, base.e2e_ms.p50),
                if why.is_empty() {
                    "no difference the server's figures explain".into()
                } else {
                    why.join("; ")
                }
            ));
        }
        out
    }
}
