//! The pre-flight: before anything is measured, a one-token request (twice, so the
//! transport learns the server's habit after streamed answers), and KServe's own checks;
//! a wrong key, model or upstream ends the command here, in the server's words.

use std::sync::Arc;
use std::time::Duration;

use quetta_engine::setting::Setting as S;
use quetta_engine::{Engine, EngineError, EngineRequest, Message, Prompt, RequestParams};
use quetta_openai::OpenAiConfig;

use crate::{Error, Result};
use quetta_protocols::Protocol;

/// The server's own words in an error: the body it sent with a status, else the error.
pub(crate) fn preflight_reason(e: &EngineError) -> String {
    match e {
        EngineError::HttpStatus { status, body_excerpt, .. } => {
            format!("HTTP {status}: {}", body_excerpt.trim())
        }
        other => other.to_string(),
    }
}

/// KServe's own checks before the one-token request: the server is live, the model ready,
/// and its metadata lists the tensors every request sends.
pub(crate) async fn kserve_preflight(
    cfg: &OpenAiConfig,
    given: &str,
    tensors: quetta_protocols::kserve::Tensors,
) -> Result<()> {
    use quetta_protocols::kserve;
    let transport = quetta_http::Transport::new(&cfg.transport()).map_err(Error::client)?;
    kserve::preflight(&transport, &cfg.base_url, cfg.api_key.as_ref(), &cfg.model, tensors)
        .await
        .map_err(|e| Error::preflight(given, format!("pre-flight: {given}: {e}")))
}

/// One request for a single token, unmeasured: a dead upstream behind a proxy, an unknown
/// model or a refused key ends the command here, in the server's words. With `learn`, it
/// is sent twice, to learn the server's habit with connections ([`learn_habit`]); a
/// transport that knows it already (a managed endpoint, whose every request is billed)
/// sends it once.
pub(crate) async fn preflight_request(
    engine: &dyn Engine,
    base_url: &str,
    protocol: Protocol,
    headers: &[(String, String)],
    learn: bool,
) -> Result<()> {
    match preflight_req(protocol, headers) {
        Some(req) if learn => learn_habit(engine, base_url, req).await,
        Some(req) => one_preflight(engine, base_url, req).await,
        // its cheapest valid call uploads a recording: the model list was the check
        None => Ok(()),
    }
}

/// The pre-flight's one-token request (`None` for transcription).
fn preflight_req(protocol: Protocol, headers: &[(String, String)]) -> Option<EngineRequest> {
    if protocol.kind() == quetta_engine::RequestKind::Transcribe {
        return None;
    }
    let prompt = if protocol.kind() == quetta_engine::RequestKind::Rank {
        Prompt::Rank { query: "Hi".into(), documents: vec!["Hi".into()] }
    } else if protocol.takes_messages() {
        Prompt::Chat(vec![Message::text("user", "Hi")])
    } else {
        Prompt::Text("Hi".into())
    };
    let mut req = EngineRequest::new(u64::MAX, prompt);
    // (OpenAI's Responses API refuses fewer than 16 output tokens)
    req.max_tokens = Some(if protocol == Protocol::Responses { 16 } else { 1 });
    req.params = Arc::new(RequestParams { extra_headers: headers.to_vec(), ..Default::default() });
    Some(req)
}

/// Send `req` twice, a moment apart: the second goes over the first's connection when the
/// server keeps it after a streamed answer, or over a new one when the server closed it
/// (llama.cpp), so the transport knows the server's habit before anything is measured and
/// never makes a measured request wait on a connection's first reuse to learn it.
async fn learn_habit(engine: &dyn Engine, base_url: &str, req: EngineRequest) -> Result<()> {
    one_preflight(engine, base_url, req.clone()).await?;
    // long enough for the connection to go back to the pool (or for a closing server's
    // end of stream to arrive); should it not, the habit is learnt on the first reuse
    tokio::time::sleep(HABIT_PAUSE).await;
    one_preflight(engine, base_url, req).await
}

/// The pause between the pre-flight's two requests.
const HABIT_PAUSE: Duration = Duration::from_millis(50);

async fn one_preflight(engine: &dyn Engine, base_url: &str, req: EngineRequest) -> Result<()> {
    let now = std::time::Instant::now();
    let run = quetta_loadgen::execute(engine, req, 1, now, now, now);
    let o = tokio::time::timeout(PREFLIGHT_TIMEOUT, run).await.map_err(|_| {
        Error::preflight(base_url, format!(
            "pre-flight: {base_url} gave no answer to a one-token request within {} s (skip the check with {})",
            PREFLIGHT_TIMEOUT.as_secs(),
            S::Preflight
        ))
    })?;
    match &o.error {
        None => Ok(()),
        Some(e) => Err(Error::preflight(
            base_url,
            format!(
                "pre-flight: a one-token request to {base_url} failed: {} (skip the check with {})",
                preflight_reason(e),
                S::Preflight
            ),
        )),
    }
}

/// How long the pre-flight request may take.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(60);
