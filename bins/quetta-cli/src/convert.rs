//! The one conversion of `run`'s flags to a [`quetta::Benchmark`].

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use quetta::workload::dataset::Filters;
use quetta::workload::spec::{DatasetFormat, SessionFormat, Source, Vision};
use quetta::{Arrival, Benchmark, History, Load, Protocol, SimConfig, Target, WorkloadSpec};

use crate::args::RunArgs;
use crate::values::{
    ArrivalArg, Backend, BackendArg, BedrockApiArg, DatasetArg, DatasetName, Endpoint, HistoryArg,
    KserveTensorsArg, ModalityArg, ModeArg, PacingArg, PayloadArg, SessionArg, VertexApiArg,
};

impl RunArgs {
    /// Whether the run targets Quetta's embedded simulator.
    pub fn embedded_simulator(&self) -> bool {
        self.target.base_url.is_none()
            && !matches!(
                self.backend(),
                BackendArg::Sagemaker | BackendArg::Bedrock | BackendArg::Vertex
            )
    }

    /// The kind of target (`openai` for any protocol named by --backend).
    pub fn backend(&self) -> BackendArg {
        match self.target.backend {
            Some(Backend::Kind(k)) => k,
            _ => BackendArg::Openai,
        }
    }

    /// The protocol of the flags: --endpoint-type, else --backend's protocol, else the
    /// OpenAI API of --endpoint (vLLM's backends call the completions API, as `vllm bench
    /// serve` does), or the protocol whose path --endpoint names.
    pub fn protocol(&self) -> Protocol {
        if let Some(p) = self.target.endpoint_type {
            return p;
        }
        if let Some(Backend::Protocol(p)) = self.target.backend {
            return p;
        }
        let completions = matches!(self.workload.dataset_name, Some(DatasetName::RandomIds))
            || matches!(self.backend(), BackendArg::Vllm | BackendArg::Sglang | BackendArg::Tgi);
        match &self.target.endpoint {
            Some(Endpoint::Chat) => Protocol::Chat,
            Some(Endpoint::Completions) => Protocol::Completions,
            Some(Endpoint::Path(p)) => Protocol::from_path(p).unwrap_or(Protocol::Chat),
            None if completions => Protocol::Completions,
            None => Protocol::Chat,
        }
    }

    /// The requests to send: --num-requests, or vLLM's --num-prompts (its inputs, in a
    /// batched run: requests = prompts / batch size, rounded up).
    fn requests(&self) -> Option<u64> {
        let batched = !self.protocol().kind().generates();
        let per = u64::from(self.workload.random_batch_size);
        self.load.num_requests.or(self.load.num_prompts.map(|n| {
            if batched {
                n.div_ceil(per)
            } else {
                n
            }
        }))
    }

    /// The path --endpoint gives, where it is not the protocol's own.
    fn path(&self) -> Option<String> {
        match &self.target.endpoint {
            Some(Endpoint::Path(p)) if Protocol::from_path(p) != Some(self.protocol()) => {
                Some(p.clone())
            }
            _ => None,
        }
    }

    /// Warnings about flags whose meaning differs from the same words in vLLM.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.target.backend == Some(Backend::Kind(BackendArg::Openai))
            && self.target.endpoint.is_none()
        {
            w.push("--backend openai calls the chat API here; vLLM's --backend openai calls /v1/completions (give --endpoint /v1/completions for that)".into());
        }
        if self.workload.dataset_name == Some(DatasetName::Sonnet) {
            w.push("--dataset-name sonnet: each line of --dataset-path is one prompt; vLLM builds its sonnet prompts of fixed length from random lines".into());
        }
        if self.sharding.coordinator.is_some() && shard_secret().is_none() {
            w.push(format!("--coordinator without {SHARD_SECRET_ENV}: any process that reaches shard 0's port and knows the run's flags may join as a shard; give every shard the same secret in {SHARD_SECRET_ENV}"));
        }
        if self.backend() == BackendArg::Litellm && self.api_key().is_none() {
            w.push("--backend litellm without a key (--api-key, OPENAI_API_KEY or LITELLM_API_KEY): a proxy with a master key refuses every request".into());
        }
        w
    }

    /// The API key: --api-key, else the environment of the target's kind (a key goes
    /// only to the service it is for: ANTHROPIC_API_KEY alone to Anthropic's protocol).
    fn api_key(&self) -> Option<quetta::ApiKey> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let key = match (self.backend(), self.protocol()) {
            (BackendArg::Litellm, _) => self
                .target
                .api_key
                .clone()
                .or_else(|| env("OPENAI_API_KEY"))
                .or_else(|| env("LITELLM_API_KEY")),
            (_, Protocol::Messages) => {
                self.target.api_key.clone().or_else(|| env("ANTHROPIC_API_KEY"))
            }
            _ => self.target.api_key.clone().or_else(|| env("OPENAI_API_KEY")),
        };
        key.filter(|k| !k.is_empty()).map(quetta::ApiKey::new)
    }

    fn multiturn(&self) -> bool {
        self.workload.sessions.is_some()
            || self.workload.profile.as_deref().is_some_and(|p| {
                quetta::workload::profiles::find(p).is_ok_and(|p| p.is_multiturn())
            })
    }

    /// The Bedrock configuration of the flags.
    fn bedrock(&self) -> Result<quetta::managed::BedrockConfig> {
        use quetta::managed::{BedrockApi, BedrockConfig, Family};
        let m = &self.managed;
        let model = self.target.model.clone().context("--backend bedrock needs --model (a model id, an inference profile id or ARN, or a provisioned-throughput ARN)")?;
        let mut c = BedrockConfig::new(model);
        c.api = match m.bedrock_api {
            BedrockApiArg::Converse => BedrockApi::Converse,
            BedrockApiArg::Invoke => BedrockApi::Invoke,
        };
        c.region.clone_from(&m.aws_region);
        c.profile.clone_from(&m.aws_profile);
        c.endpoint_url.clone_from(&m.aws_endpoint_url);
        if c.api == BedrockApi::Converse
            && (m.bedrock_family.is_some() || m.bedrock_template.is_some())
        {
            bail!("--bedrock-family and --bedrock-template choose the body of --bedrock-api invoke; Converse's body is the same for every model");
        }
        c.family = match (&m.bedrock_family, &m.bedrock_template) {
            (Some(_), Some(_)) => bail!("give --bedrock-family or --bedrock-template, not both"),
            (Some(f), None) => Some(Family::named(f)?),
            (None, Some(p)) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: line {}, column {}: not JSON: {e}",
                        p.display(),
                        e.line(),
                        e.column()
                    )
                })?;
                let ptr = m.bedrock_text_pointer.as_deref().unwrap_or_default();
                Some(Family::custom(body, ptr, ptr))
            }
            (None, None) => None,
        };
        Ok(c)
    }

    /// The target of the flags.
    fn target(&self) -> Result<Target> {
        let m = &self.managed;
        let mut t = match (self.backend(), &self.target.base_url) {
            (BackendArg::Sagemaker | BackendArg::Bedrock | BackendArg::Vertex, Some(_)) => bail!("--base-url is for OpenAI-compatible servers; with --backend sagemaker or bedrock use --aws-endpoint-url, with vertex --vertex-endpoint-url"),
            (BackendArg::Bedrock, None) => Target::bedrock(self.bedrock()?),
            (BackendArg::Sagemaker, None) => {
                use quetta::managed::{Payload, SageMakerConfig};
                let name = m.sagemaker_endpoint.clone().context("--backend sagemaker needs --sagemaker-endpoint NAME")?;
                let mut c = SageMakerConfig::new(&name);
                c.inference_component.clone_from(&m.inference_component);
                c.target_variant.clone_from(&m.target_variant);
                c.custom_attributes.clone_from(&m.custom_attributes);
                c.region.clone_from(&m.aws_region);
                c.profile.clone_from(&m.aws_profile);
                c.endpoint_url.clone_from(&m.aws_endpoint_url);
                c.payload = match m.sagemaker_payload {
                    PayloadArg::Openai => Payload::OpenAi,
                    PayloadArg::Jumpstart => Payload::JumpStart,
                    PayloadArg::Template => {
                        let p = m.sagemaker_template.as_ref().context("--sagemaker-payload template needs --sagemaker-template FILE")?;
                        Payload::template_file(p, &m.sagemaker_text_pointer)?
                    }
                };
                Target::sagemaker(c)
            }
            (BackendArg::Vertex, None) => {
                use quetta::managed::{VertexApi, VertexConfig};
                let project = m.vertex_project.clone().context("--backend vertex needs --vertex-project P")?;
                let mut c = VertexConfig::new(project, &m.vertex_location, "");
                c.api = match m.vertex_api {
                    VertexApiArg::Gemini => VertexApi::Gemini,
                    VertexApiArg::Openai => VertexApi::OpenAi,
                    VertexApiArg::Predict => VertexApi::Predict,
                };
                c.endpoint_id.clone_from(&m.vertex_endpoint_id);
                c.endpoint_url.clone_from(&m.vertex_endpoint_url);
                c.credentials_file.clone_from(&m.vertex_credentials);
                Target::vertex(c)
            }
            (BackendArg::Litellm, Some(u)) => Target::litellm(u),
            (_, Some(u)) => Target::openai(u),
            (_, None) => {
                let c = SimConfig {
                    ttft: Duration::from_secs_f64(self.target.sim_ttft_ms.max(0.0) / 1e3),
                    itl: Duration::from_secs_f64(self.target.sim_itl_ms.max(0.0) / 1e3),
                    faults: self.target.sim_faults.clone(),
                    max_running: self.target.sim_max_running,
                    warm_up: self.target.sim_warm_up,
                    ..SimConfig::default()
                };
                Target::simulator(match self.twin()? {
                    Some(t) => t.sim_config(c),
                    None => c,
                })
            }
        };
        t.protocol = self.protocol();
        t.protocol_options.chain_responses = self.target.chain_responses;
        t.protocol_options.kserve_tensors = match self.target.kserve_tensors {
            KserveTensorsArg::Trtllm => quetta::protocols::kserve::Tensors::TensorRtLlm,
            KserveTensorsArg::Vllm => quetta::protocols::kserve::Tensors::Vllm,
            KserveTensorsArg::Ids => quetta::protocols::kserve::Tensors::TokenIds,
        };
        t.path = self.path();
        t.model.clone_from(&self.target.model);
        t.api_key = self.api_key();
        t.preflight = !self.target.no_preflight;
        t.insecure = self.target.insecure;
        t.ca_cert.clone_from(&self.target.ca_cert);
        t.http2 = self.target.http2;
        t.headers.clone_from(&self.target.headers);
        t.connect_timeout = self.timeouts.connect_timeout;
        t.record_headers.clone_from(&self.target.record_headers);
        t.session_header = Some(self.workload.session_header.clone()).filter(|h| h != "none");
        t.session_body_field =
            Some(self.workload.session_body_field.clone()).filter(|h| h != "none");
        Ok(t)
    }

    /// The workload of the flags.
    fn workload(&self) -> WorkloadSpec {
        let source = if let Some(p) = &self.workload.sessions {
            let format = match self.workload.session_format {
                SessionArg::Sharegpt => SessionFormat::Sharegpt,
                SessionArg::TurnsJsonl => SessionFormat::TurnsJsonl,
                SessionArg::Synth => SessionFormat::Synth,
            };
            Source::Sessions { path: p.clone(), format }
        } else if let Some(p) = &self.workload.trace {
            let format = self.workload.trace_format.format();
            Source::Trace { path: p.clone(), format, columns: self.workload.trace_columns.clone() }
        } else if let Some(p) = &self.workload.dataset {
            let format = match (self.workload.dataset_format, self.workload.dataset_name) {
                (Some(DatasetArg::Jsonl), _) | (None, Some(DatasetName::Custom)) => {
                    DatasetFormat::Jsonl
                }
                (Some(DatasetArg::Text), _) | (None, Some(DatasetName::Sonnet)) => {
                    DatasetFormat::Text
                }
                _ => DatasetFormat::Sharegpt,
            };
            let filters = Filters {
                min_input_len: self.workload.min_input_len,
                max_input_len: self.workload.max_input_len,
                max_output_len: self.workload.max_output_len,
            };
            Source::Dataset { path: p.clone(), format, filters }
        } else if let Some(p) = &self.workload.audio {
            Source::Audio { path: p.clone() }
        } else if let Some(p) = &self.workload.workload_file {
            Source::Distribution { path: p.clone() }
        } else if let Some(name) = &self.workload.profile {
            Source::Profile { name: name.clone(), file: self.workload.profile_file.clone() }
        } else {
            Source::Synthetic
        };
        WorkloadSpec {
            source,
            input_len: self.workload.input_len,
            input_stddev: self.workload.input_len_stddev,
            output_len: self.workload.output_len,
            output_stddev: self.workload.output_len_stddev,
            range_ratio: self.workload.random_range_ratio,
            input_range_ratio: self.workload.input_range_ratio,
            output_range_ratio: self.workload.output_range_ratio,
            prefix_len: self.workload.random_prefix_len,
            chat: self.protocol().takes_messages(),
            tokenizer: self.workload.tokenizer.clone(),
            token_ids: self.workload.token_ids
                || self.workload.dataset_name == Some(DatasetName::RandomIds),
            stress: self.workload.mode == ModeArg::Stress,
            vision: (self.workload.modality == ModalityArg::Vision).then(|| Vision {
                images: self.workload.images.clone(),
                per_request: self.workload.images_per_request,
            }),
            max_turns: self.workload.max_turns,
            replay_speed: self.workload.trace_speed,
            block_size: self.workload.block_size,
            seed: self.load.seed,
            kind: self.protocol().kind(),
            inputs_per_request: self.workload.random_batch_size,
        }
    }

    fn arrival(&self) -> Arrival {
        match (self.load.burstiness, self.load.arrival.unwrap_or(ArrivalArg::Poisson)) {
            (Some(b), _) => Arrival::Gamma { burstiness: b },
            (None, ArrivalArg::Gamma) => Arrival::Gamma { burstiness: 1.0 },
            (None, ArrivalArg::Poisson) => Arrival::Poisson,
            (None, ArrivalArg::Constant) => Arrival::Constant,
        }
    }

    /// The load of the flags (`None`: the workload's own, or a closed loop of 16).
    fn load(&self) -> Result<Option<Load>> {
        let cap = self.load.max_concurrency;
        let open = |rate: f64, arrival| Some(Load::Open { rate, arrival, max_concurrency: cap });
        if self.multiturn() {
            let n = self.load.session_concurrency.unwrap_or(8);
            return Ok(match (self.load.session_rate, self.load.pacing) {
                (Some(r), _) => open(r, self.arrival()),
                (None, PacingArg::Recorded) => Some(Load::Recorded { max_concurrency: cap }),
                (None, PacingArg::Interleaved) => Some(Load::Interleaved { sessions: n }),
                (None, PacingArg::PerSession) => Some(Load::closed(n)),
            });
        }
        if self.load.session_rate.is_some()
            || self.load.session_concurrency.is_some()
            || self.load.num_sessions.is_some()
        {
            bail!("--session-rate, --session-concurrency and --num-sessions apply to multi-turn runs (--sessions or a multi-turn profile)");
        }
        if (self.load.arrival.is_some() || self.load.burstiness.is_some())
            && self.load.request_rate.is_none()
            && self.workload.profile_file.is_none()
        {
            bail!("--arrival and --burstiness shape an open loop: give --request-rate (or --session-rate)");
        }
        if self.load.concurrency.is_some() && cap.is_some() {
            bail!("--concurrency and --max-concurrency both set the requests in flight of a closed loop: give one");
        }
        if self.load.request_rate == Some(f64::INFINITY) {
            if self.load.ramp_from.is_some() {
                bail!("--ramp-from needs a finite --request-rate to ramp to");
            }
            // vLLM's `inf`: no schedule; every request at once, or --max-concurrency at a time
            let n = match (cap, self.load.duration) {
                (Some(c), _) => c,
                (None, None) => usize::try_from(self.requests().unwrap_or(quetta::DEFAULT_REQUESTS)).unwrap_or(usize::MAX),
                (None, Some(_)) => bail!("--request-rate inf with --duration sends without end: cap it with --max-concurrency"),
            };
            return Ok(Some(Load::closed(n)));
        }
        if let (Some(size), Some(gap)) = (self.load.burst_size, self.load.burst_gap) {
            let size = u32::try_from(size).unwrap_or(u32::MAX);
            return Ok(open(1.0, Arrival::Bursts { size, gap }));
        }
        if let Some(rate) = self.load.request_rate {
            let arrival = match self.load.ramp_from {
                Some(from) => Arrival::Ramp {
                    from,
                    over: self.load.ramp_over.unwrap_or(Duration::from_secs(60)),
                    poisson: self.load.arrival != Some(ArrivalArg::Constant),
                },
                None => self.arrival(),
            };
            return Ok(open(rate, arrival));
        }
        if let Some(c) = self.load.concurrency {
            return Ok(Some(Load::closed(c)));
        }
        let replay = self.workload.trace.is_some()
            || self.workload.workload_file.is_some()
            || self.workload.profile.as_deref().is_some_and(|p| {
                quetta::workload::profiles::find(p)
                    .is_ok_and(|p| p.source != quetta::workload::profiles::Source::Synthetic)
            });
        match (cap, replay) {
            (Some(_), true) => Ok(Some(Load::Recorded { max_concurrency: cap })),
            // vLLM's default rate is inf: --max-concurrency alone is a closed loop
            (Some(c), false) if self.workload.profile_file.is_none() => Ok(Some(Load::closed(c))),
            _ => Ok(None),
        }
    }

    /// The twin named by --sim-model, its what-if flags applied, counting prompts with
    /// --tokenizer when one is given.
    pub fn twin(&self) -> Result<Option<quetta::Twin>> {
        let Some(p) = &self.twin.sim_model else { return Ok(None) };
        if self.target.base_url.is_some() {
            bail!("--sim-model makes the embedded simulator a twin: drop --base-url");
        }
        let w = quetta::sim::model::WhatIf {
            max_seqs: self.twin.sim_max_seqs,
            kv_tokens: self.twin.sim_kv_tokens,
            speed: self.twin.sim_speed,
        };
        Ok(Some(quetta::Twin::load(p, w, self.workload.tokenizer.as_deref())?))
    }

    /// The one conversion of the flags to a benchmark (reads only a --sim-model file and
    /// its tokenizer).
    pub fn to_benchmark(&self) -> Result<Benchmark> {
        let r = self.output.min_success_rate;
        if !(0.0..=1.0).contains(&r) {
            bail!("--min-success-rate must be between 0 and 1, got {r}");
        }
        const VLLM_METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];
        if let Some(m) =
            self.output.percentile_metrics.iter().find(|m| !VLLM_METRICS.contains(&m.trim()))
        {
            bail!("--percentile-metrics: {m:?} is not one of {}", VLLM_METRICS.join(", "));
        }
        if self.workload.dataset_name.is_some_and(|d| {
            matches!(d, DatasetName::Random | DatasetName::RandomIds | DatasetName::RandomRerank)
        }) && self.workload.dataset.is_some()
        {
            bail!("--dataset-name random makes its own prompts: drop --dataset-path, or name the file's format (sharegpt, custom, sonnet)");
        }
        if self.workload.dataset_name.is_some_and(|d| {
            matches!(d, DatasetName::Sharegpt | DatasetName::Sonnet | DatasetName::Custom)
        }) && self.workload.dataset.is_none()
        {
            bail!(
                "--dataset-name {:?} reads a file: give --dataset-path FILE",
                self.workload
                    .dataset_name
                    .map(|d| d.to_possible_value().map(|v| v.get_name().to_owned()))
                    .unwrap_or_default()
                    .unwrap_or_default()
            );
        }
        let mut b = Benchmark::new(self.target()?)
            .workload(self.workload())
            .tool(quetta::Tool::new("quetta-bench", env!("CARGO_PKG_VERSION")));
        b.load = self.load()?;
        b.requests = self.requests();
        if self.workload.dataset_name == Some(DatasetName::RandomRerank)
            && self.protocol().kind() != quetta::RequestKind::Rank
        {
            bail!("--dataset-name random-rerank makes queries and documents: give a rerank protocol (--backend vllm-rerank, tei-rerank or vllm-score)");
        }
        b.duration = self.load.duration;
        b.warmup = self.load.warmup;
        b.drain_timeout = self.timeouts.drain_timeout;
        let slos: Vec<&str> = self
            .output
            .slo
            .iter()
            .map(String::as_str)
            .chain(self.output.goodput.iter().map(String::as_str))
            .collect();
        b.slos = (!slos.is_empty())
            .then(|| slos.join(","))
            .as_deref()
            .map(str::parse)
            .transpose()
            .context(if self.output.goodput.is_empty() { "--slo" } else { "--slo/--goodput" })?;
        b.label.clone_from(&self.output.label);
        b.metadata = self.output.metadata.iter().cloned().collect();
        b.percentiles.clone_from(&self.output.percentiles);
        b.output_dir = Some(
            self.output.output_dir.clone().unwrap_or_else(|| quetta::RunDir::default_path("run")),
        );
        b.overwrite = self.output.overwrite;
        b.sampling.temperature = self.workload.temperature;
        b.sampling.top_p = self.workload.top_p;
        b.extra_body = match &self.workload.extra_body {
            Some(s) => serde_json::from_str(s).context("--extra-body must be a JSON object")?,
            None => Default::default(),
        };
        b.ignore_eos = self.workload.ignore_eos;
        b.exact_output_length = self.workload.exact_output_length;
        b.stream = !self.workload.no_stream;
        b.timeouts.first_token = self.timeouts.ttft_timeout;
        b.timeouts.idle = self.timeouts.idle_timeout;
        b.timeouts.total = self.timeouts.request_timeout;
        b.retries = self.timeouts.retries;
        b.retry_backoff = self.timeouts.retry_backoff;
        b.sessions.think = self
            .load
            .think_time
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--think-time: {e}"))?;
        b.sessions.history = match self.workload.history {
            HistoryArg::Engine => History::Engine,
            HistoryArg::Recorded => History::Recorded,
        };
        b.sessions.count = self.load.num_sessions;
        b.sessions.max_concurrency = self.load.max_concurrency.filter(|_| self.multiturn());
        b.telemetry.server_metrics.clone_from(&self.telemetry.server_metrics);
        b.telemetry.server_metrics_interval = self.telemetry.server_metrics_interval;
        b.telemetry.server_metrics_key = self
            .telemetry
            .server_metrics_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .map(quetta::ApiKey::new);
        b.telemetry.gpu = self.telemetry.gpu_telemetry;
        b.telemetry.gpu_interval = self.telemetry.gpu_interval;
        b.stop_on_saturation = self.load.stop_on_saturation;
        b.reset_prefix_cache.clone_from(&self.workload.reset_prefix_cache);
        b.seed = self.load.seed;
        b.threads = self.load.threads;
        b.sharding = self.sharding()?;
        Ok(b)
    }

    /// `--shard K/N`, or `--shards N` with K from JOB_COMPLETION_INDEX; `--coordinator`.
    fn sharding(&self) -> Result<Option<quetta::Sharding>> {
        let shard = match (&self.sharding.shard, self.sharding.shards) {
            (Some(s), _) => {
                s.parse::<quetta::Shard>().map_err(|e| anyhow::anyhow!("--shard: {e}"))?
            }
            (None, Some(n)) => {
                let k = self.sharding.shard_index.as_deref().context(
                    "--shards N takes the shard from JOB_COMPLETION_INDEX, which is not set: give --shard K/N",
                )?;
                let k: u32 = k.trim().parse().map_err(|_| {
                    anyhow::anyhow!("JOB_COMPLETION_INDEX {k:?} is not a shard index")
                })?;
                quetta::Shard::new(k, n).map_err(|e| anyhow::anyhow!("--shards: {e}"))?
            }
            (None, None) => {
                if self.sharding.coordinator.is_some() {
                    bail!("--coordinator is for sharded runs: give --shard K/N or --shards N");
                }
                return Ok(None);
            }
        };
        let mut s = quetta::Sharding::alone(shard);
        s.coordinator.clone_from(&self.sharding.coordinator);
        s.timeout = self.sharding.rendezvous_timeout;
        s.secret = shard_secret();
        Ok(Some(s))
    }
}

/// The environment variable that gives every shard of a run the same secret.
pub const SHARD_SECRET_ENV: &str = "QUETTA_SHARD_SECRET";

/// The shard secret from the environment (an empty one is none).
fn shard_secret() -> Option<quetta::ShardSecret> {
    std::env::var(SHARD_SECRET_ENV).ok().filter(|s| !s.is_empty()).map(quetta::ShardSecret::new)
}
