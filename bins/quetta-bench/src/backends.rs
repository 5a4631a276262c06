//! `--backend sagemaker|vertex`: flags and engine construction for managed endpoints. Every
//! other flag of `run` (loads, workloads, outputs) works the same with them.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use quetta_engine::{Engine, Timeouts};
use quetta_http::TransportConfig;
use quetta_sagemaker::{Payload, SageMakerConfig, SageMakerEngine};
use quetta_vertex::{VertexApi, VertexConfig, VertexEngine};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SageMakerPayload {
    /// OpenAI chat body (messages API of TGI, LMI and vLLM containers); SSE answers.
    Openai,
    /// `{"inputs", "parameters"}` (JumpStart, TGI, LMI); JSON-lines answers.
    Jumpstart,
    /// --sagemaker-template FILE with {{prompt}}, {{messages}}, {{max_tokens}}, {{stream}}.
    Template,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VertexApiArg {
    /// Gemini streamGenerateContent (SSE).
    Gemini,
    /// The OpenAI-compatible endpoint (Model Garden, or --vertex-endpoint-id).
    Openai,
    /// :predict on --vertex-endpoint-id (not streamed: TTFT equals E2E).
    Predict,
}

/// Flags of the managed backends.
#[derive(Debug, Clone, Args)]
pub struct ManagedArgs {
    /// SageMaker endpoint name (--backend sagemaker).
    #[arg(long)]
    pub sagemaker_endpoint: Option<String>,
    /// SageMaker InferenceComponentName.
    #[arg(long)]
    pub inference_component: Option<String>,
    /// SageMaker TargetVariant.
    #[arg(long)]
    pub target_variant: Option<String>,
    /// SageMaker CustomAttributes, passed to the container verbatim.
    #[arg(long)]
    pub custom_attributes: Option<String>,
    /// AWS region (else AWS_REGION, AWS_DEFAULT_REGION or the profile's).
    #[arg(long)]
    pub aws_region: Option<String>,
    /// AWS profile in the shared config/credentials files (else AWS_PROFILE or default).
    #[arg(long)]
    pub aws_profile: Option<String>,
    /// SageMaker runtime endpoint override (a local fake, a VPC endpoint).
    #[arg(long)]
    pub aws_endpoint_url: Option<String>,
    /// What the SageMaker container speaks.
    #[arg(long, value_enum, default_value = "openai")]
    pub sagemaker_payload: SageMakerPayload,
    /// JSON request template for --sagemaker-payload template.
    #[arg(long)]
    pub sagemaker_template: Option<PathBuf>,
    /// JSON pointer to the text in each streamed line (template and jumpstart payloads).
    #[arg(long, default_value = "/token/text")]
    pub sagemaker_text_pointer: String,
    /// Google Cloud project (--backend vertex).
    #[arg(long)]
    pub vertex_project: Option<String>,
    /// Vertex AI location (region, or `global`).
    #[arg(long, default_value = "us-central1")]
    pub vertex_location: String,
    /// A deployed Vertex AI endpoint's id (OpenAI-compatible self-deployed models, predict).
    #[arg(long)]
    pub vertex_endpoint_id: Option<String>,
    /// Which Vertex AI API to call.
    #[arg(long, value_enum, default_value = "gemini")]
    pub vertex_api: VertexApiArg,
    /// Vertex AI endpoint override (a local fake, a proxy).
    #[arg(long)]
    pub vertex_endpoint_url: Option<String>,
    /// Google credentials file (else application default credentials).
    #[arg(long)]
    pub vertex_credentials: Option<PathBuf>,
}

/// A managed endpoint, ready to benchmark.
pub struct Managed {
    pub engine: Arc<dyn Engine>,
    /// For the summary's target: the endpoint's URL.
    pub base_url: String,
    pub model: String,
    pub backend: String,
}

pub struct Common<'a> {
    pub model: Option<&'a str>,
    pub transport: TransportConfig,
    pub timeouts: Timeouts,
    pub record_headers: Vec<String>,
    pub vision: bool,
    pub session_body_field: Option<String>,
}

pub async fn sagemaker(m: &ManagedArgs, c: Common<'_>, notes: &mut Vec<String>) -> Result<Managed> {
    let name = m
        .sagemaker_endpoint
        .clone()
        .context("--backend sagemaker needs --sagemaker-endpoint NAME")?;
    let payload = match m.sagemaker_payload {
        SageMakerPayload::Openai => Payload::OpenAi,
        SageMakerPayload::Jumpstart => Payload::JumpStart,
        SageMakerPayload::Template => {
            let p = m
                .sagemaker_template
                .as_ref()
                .context("--sagemaker-payload template needs --sagemaker-template FILE")?;
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "{}: line {}, column {}: not JSON: {e}",
                    p.display(),
                    e.line(),
                    e.column()
                )
            })?;
            Payload::Template { body, text_pointer: m.sagemaker_text_pointer.clone() }
        }
    };
    if c.vision && m.sagemaker_payload != SageMakerPayload::Openai {
        bail!("--modality vision with SageMaker needs --sagemaker-payload openai (the other payloads carry text only)");
    }
    let mut cfg = SageMakerConfig::new(&name);
    cfg.inference_component.clone_from(&m.inference_component);
    cfg.target_variant.clone_from(&m.target_variant);
    cfg.custom_attributes.clone_from(&m.custom_attributes);
    cfg.region.clone_from(&m.aws_region);
    cfg.profile.clone_from(&m.aws_profile);
    cfg.endpoint_url.clone_from(&m.aws_endpoint_url);
    cfg.payload = payload;
    cfg.model = c.model.unwrap_or(&name).to_owned();
    cfg.transport = c.transport;
    cfg.timeouts = c.timeouts;
    cfg.record_headers = c.record_headers;
    cfg.session_body_field = c.session_body_field;
    let e = SageMakerEngine::new(cfg).await.context("setting up the SageMaker adapter")?;
    let base_url = m
        .aws_endpoint_url
        .clone()
        .unwrap_or_else(|| format!("https://runtime.sagemaker.{}.amazonaws.com", e.region()));
    notes.push(format!(
        "SageMaker endpoint {name} in {} ({} payload); requests signed with SigV4, credentials from the AWS chain refreshed before expiry",
        e.region(),
        serde_json::to_value(m.sagemaker_payload)?.as_str().unwrap_or("?")
    ));
    let model = c.model.unwrap_or(&name).to_owned();
    Ok(Managed {
        engine: Arc::new(e),
        base_url: format!("{base_url}/endpoints/{name}"),
        model,
        backend: "sagemaker".into(),
    })
}

pub async fn vertex(m: &ManagedArgs, c: Common<'_>, notes: &mut Vec<String>) -> Result<Managed> {
    let project = m.vertex_project.clone().context("--backend vertex needs --vertex-project P")?;
    let api = match m.vertex_api {
        VertexApiArg::Gemini => VertexApi::Gemini,
        VertexApiArg::Openai => VertexApi::OpenAi,
        VertexApiArg::Predict => VertexApi::Predict,
    };
    let model = match (c.model, api) {
        (Some(m), _) => m.to_owned(),
        (None, VertexApi::Predict) => m.vertex_endpoint_id.clone().unwrap_or_default(),
        (None, _) => bail!("--backend vertex needs --model (e.g. gemini-2.0-flash-001)"),
    };
    if c.vision && api == VertexApi::Predict {
        bail!("--modality vision needs --vertex-api gemini or openai");
    }
    let mut cfg = VertexConfig::new(project, &m.vertex_location, &model);
    cfg.api = api;
    cfg.endpoint_id.clone_from(&m.vertex_endpoint_id);
    cfg.endpoint_url.clone_from(&m.vertex_endpoint_url);
    cfg.credentials_file.clone_from(&m.vertex_credentials);
    cfg.transport = c.transport;
    cfg.timeouts = c.timeouts;
    cfg.record_headers = c.record_headers;
    let e = VertexEngine::new(cfg).await.context("setting up the Vertex AI adapter")?;
    notes.push(format!(
        "Vertex AI ({} API, {}); access tokens from {}, refreshed before expiry",
        serde_json::to_value(m.vertex_api)?.as_str().unwrap_or("?"),
        m.vertex_location,
        e.credentials_source()
    ));
    if api == VertexApi::Predict {
        notes.push("Vertex predict is not streamed: TTFT equals E2E, and no inter-token latency is reported".into());
    }
    let base = m
        .vertex_endpoint_url
        .clone()
        .unwrap_or_else(|| format!("https://{}-aiplatform.googleapis.com", m.vertex_location));
    let backend = e.name().to_owned();
    Ok(Managed { engine: Arc::new(e), base_url: base, model, backend })
}
