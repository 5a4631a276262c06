//! KServe v2 over gRPC, as Triton serves TensorRT-LLM's ensemble: `ModelStreamInfer`
//! (decoupled, one response per token, an empty final response where asked for),
//! `ModelInfer`, `ServerLive`, `ServerReady`, `ModelReady` and `ModelMetadata`.
//!
//! A generation request is read strictly (one uncompressed message; the model's name; every
//! input one of the ensemble's, with its datatype, or every input one of Triton's vLLM
//! backend's, never a mix: the simulator's model takes either layout, and its metadata lists
//! both; the only output `text_output`) and put
//! into the shape of Triton's HTTP generate body, so that it runs through the simulator's
//! one pipeline (timing, faults, records): its per-token events are then carried as
//! protobuf responses (see `SimStream`), and the call ends with its status in the trailers.
//! A request refused answers as Triton does: an error response in the stream for a
//! request it cannot run (unknown model or input), the call's status otherwise (a wrong key:
//! `UNAUTHENTICATED`, in the headers of a call with no message).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use prost::Message;
use quetta_protocols::kserve::{self, pb};
use serde_json::{json, Map, Value};

use crate::dialect::Refusal;

pub(crate) const PREFIX: &str = "/inference.GRPCInferenceService/";

/// Triton's vLLM backend's inputs and their datatypes (its `model.json` models).
const VLLM_INPUTS: [(&str, &str); 4] = [
    ("text_input", "BYTES"),
    ("stream", "BOOL"),
    ("sampling_parameters", "BYTES"),
    ("exclude_input_in_output", "BOOL"),
];

/// The ensemble's inputs and their datatypes (TensorRT-LLM's `ensemble` model).
const INPUTS: [(&str, &str); 7] = [
    ("text_input", "BYTES"),
    ("max_tokens", "INT32"),
    ("stream", "BOOL"),
    ("min_length", "INT32"),
    ("temperature", "FP32"),
    ("top_p", "FP32"),
    ("random_seed", "UINT64"),
];

fn refusal(status: StatusCode, kind: &'static str, message: String) -> Refusal {
    Refusal { status, kind, message }
}

/// The one message of a request body.
fn message(body: &[u8]) -> Result<&[u8], Refusal> {
    let bad = |m: &str| refusal(StatusCode::BAD_REQUEST, "INTERNAL", m.to_owned());
    let (head, rest) = body.split_at_checked(5).ok_or_else(|| bad("a truncated gRPC message"))?;
    if head[0] != 0 {
        return Err(bad("a compressed message: no compression was negotiated"));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len != rest.len() {
        return Err(bad("the body is not one gRPC message"));
    }
    Ok(rest)
}

/// One input's value as JSON.
fn value(name: &str, datatype: &str, raw: &[u8]) -> Result<Value, Refusal> {
    let bad = || {
        refusal(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            format!("unexpected shape for input '{name}' for model 'ensemble'"),
        )
    };
    Ok(match datatype {
        "BYTES" => {
            let parts = kserve::bytes_elements(raw).ok_or_else(bad)?;
            Value::String(String::from_utf8_lossy(&parts.concat()).into_owned())
        }
        "INT32" => json!(i32::from_le_bytes(raw.try_into().map_err(|_| bad())?)),
        "BOOL" => Value::Bool(*raw.first().ok_or_else(bad)? != 0),
        "FP32" => json!(f32::from_le_bytes(raw.try_into().map_err(|_| bad())?)),
        _ => json!(u64::from_le_bytes(raw.try_into().map_err(|_| bad())?)),
    })
}

/// A `ModelInferRequest` body, checked as Triton checks it, as Triton's HTTP generate body
/// (`stream` from the method and the `stream` input); `empty_final` records whether the
/// client asked for an empty final response.
pub(crate) fn request_body(body: &[u8], model: &str, stream: bool) -> Result<Value, Refusal> {
    let req = pb::ModelInferRequest::decode(message(body)?).map_err(|e| {
        refusal(StatusCode::BAD_REQUEST, "INTERNAL", format!("cannot parse the request: {e}"))
    })?;
    if req.model_name != model {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("Request for unknown model: '{}' is not found", req.model_name),
        ));
    }
    let invalid = |m: String| refusal(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", m);
    if req.raw_input_contents.len() != req.inputs.len() {
        return Err(invalid(format!(
            "[request id: {}] expected {} raw input contents, got {}",
            req.id,
            req.inputs.len(),
            req.raw_input_contents.len()
        )));
    }
    let vllm = req.inputs.iter().any(|t| t.name == "sampling_parameters");
    let layout: &[(&str, &str)] = if vllm { &VLLM_INPUTS } else { &INPUTS };
    let mut b = Map::new();
    for (t, raw) in req.inputs.iter().zip(&req.raw_input_contents) {
        let Some((_, want)) = layout.iter().find(|(n, _)| *n == t.name) else {
            return Err(invalid(format!(
                "[request id: {}] unexpected inference input '{}' for model '{model}'",
                req.id, t.name
            )));
        };
        if t.datatype != *want {
            return Err(invalid(format!("[request id: {}] inference input '{}' data-type is '{}', but model '{model}' expects '{want}'", req.id, t.name, t.datatype)));
        }
        b.insert(t.name.clone(), value(&t.name, &t.datatype, raw)?);
    }
    if let Some(o) = req.outputs.iter().find(|o| o.name != kserve::TEXT_OUTPUT) {
        return Err(invalid(format!(
            "[request id: {}] unexpected inference output '{}' for model '{model}'",
            req.id, o.name
        )));
    }
    if vllm {
        vllm_sampling(&mut b, &req.id, model)?;
    }
    for need in ["text_input", "max_tokens"] {
        if !b.contains_key(need) {
            return Err(invalid(format!(
                "[request id: {}] input '{need}' is required for model '{model}'",
                req.id
            )));
        }
    }
    let asked = b.get("stream").and_then(Value::as_bool).unwrap_or(false);
    b.insert("stream".into(), Value::Bool(stream && asked));
    let empty_final = matches!(
        req.parameters.get(kserve::EMPTY_FINAL).and_then(|p| p.parameter_choice.as_ref()),
        Some(pb::Parameter::BoolParam(true))
    );
    b.insert("empty_final".into(), Value::Bool(empty_final));
    Ok(Value::Object(b))
}

/// The vLLM backend's `sampling_parameters` (a JSON object in a string) as the ensemble's
/// inputs: `max_tokens` (vLLM's default, 16, when absent), `min_tokens` (or `max_tokens` with
/// `ignore_eos`) as `min_length`, `temperature`, `top_p`, `seed`; any other key is refused,
/// as vLLM refuses an unknown sampling parameter.
fn vllm_sampling(b: &mut Map<String, Value>, id: &str, model: &str) -> Result<(), Refusal> {
    let invalid = |m: String| refusal(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", m);
    let sp = b.remove("sampling_parameters").unwrap_or(Value::Null);
    let sp: Map<String, Value> =
        sp.as_str().and_then(|t| serde_json::from_str(t).ok()).ok_or_else(|| {
            invalid(format!(
                "[request id: {id}] sampling_parameters of model '{model}' is not a JSON object"
            ))
        })?;
    const KNOWN: [&str; 6] =
        ["max_tokens", "min_tokens", "ignore_eos", "temperature", "top_p", "seed"];
    if let Some(k) = sp.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(invalid(format!(
            "[request id: {id}] unexpected keyword argument '{k}' in sampling_parameters"
        )));
    }
    let max = sp.get("max_tokens").and_then(Value::as_u64).unwrap_or(16);
    b.insert("max_tokens".into(), json!(max));
    let ignore_eos = sp.get("ignore_eos").and_then(Value::as_bool).unwrap_or(false);
    if let Some(n) =
        if ignore_eos { Some(max) } else { sp.get("min_tokens").and_then(Value::as_u64) }
    {
        b.insert("min_length".into(), json!(n));
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "top_p"), ("seed", "random_seed")]
    {
        if let Some(v) = sp.get(from) {
            b.insert(to.into(), v.clone());
        }
    }
    b.remove("exclude_input_in_output");
    Ok(())
}

/// A gRPC status code for a refusal's HTTP status.
fn code_of(status: StatusCode) -> u32 {
    match status.as_u16() {
        401 => 16,
        403 => 7,
        404 => 5,
        429 => 8,
        400 | 422 => 3,
        503 => 14,
        _ => 13,
    }
}

/// Trailers (or the headers of a call with no message) carrying a status.
pub(crate) fn status_headers(code: u32, message: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from(code));
    if !message.is_empty() {
        let enc: String = message
            .bytes()
            .map(|b| {
                if (0x20..0x7f).contains(&b) && b != b'%' {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&enc) {
            h.insert("grpc-message", v);
        }
    }
    h
}

/// How a refused request is answered: an error response in the stream for a request the
/// model cannot run (Triton's way), else the call's status alone.
pub(crate) fn refusal_answer(r: &Refusal, stream: bool) -> GrpcWhole {
    let per_request = matches!(r.status.as_u16(), 400 | 404 | 422);
    if stream && per_request {
        let m =
            pb::ModelStreamInferResponse { error_message: r.message.clone(), infer_response: None };
        GrpcWhole::new(Some(kserve::frame(&m)), status_headers(0, ""))
    } else {
        GrpcWhole::status_only(code_of(r.status), &r.message)
    }
}

/// One response carrying `text` (none: the empty final response), flagged final or not.
pub(crate) fn response(
    model: &str,
    id: &str,
    text: Option<&str>,
    last: bool,
) -> pb::ModelInferResponse {
    let mut r = pb::ModelInferResponse {
        model_name: model.into(),
        model_version: "1".into(),
        id: id.into(),
        ..pb::ModelInferResponse::default()
    };
    if let Some(t) = text {
        r.outputs.push(pb::InferTensor {
            name: kserve::TEXT_OUTPUT.into(),
            datatype: "BYTES".into(),
            shape: vec![1, 1],
            ..pb::InferTensor::default()
        });
        r.raw_output_contents.push(kserve::bytes_element(t.as_bytes()));
    }
    if last {
        r.parameters.insert(kserve::FINAL.into(), pb::InferParameter::bool(true));
    }
    r
}

/// The protobuf frames of a chunk of the stream's events (Triton's generate events, one
/// per token; an `error` event becomes an error response). An event that is not the JSON
/// it should be (a fault) becomes a message that is not protobuf. `last`: the chunk ends
/// the stream, and its last response is flagged final (unless an empty final one follows).
pub(crate) fn frames(events: &[u8], model: &str, id: &str, last: bool) -> Bytes {
    let mut texts: Vec<Result<Value, ()>> = Vec::new();
    for ev in events.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let data = ev.strip_prefix(b"data: ").or_else(|| ev.strip_prefix(b"data:")).unwrap_or(ev);
        texts.push(serde_json::from_slice::<Value>(data).map_err(|_| ()));
    }
    let mut out = Vec::new();
    let n = texts.len();
    for (i, t) in texts.into_iter().enumerate() {
        let m = match t {
            Ok(v) if v.get("error").is_some() => pb::ModelStreamInferResponse {
                error_message: v["error"].as_str().unwrap_or("engine failure").to_owned(),
                infer_response: None,
            },
            Ok(v) => {
                let text = v.get("text_output").and_then(Value::as_str).unwrap_or("");
                pb::ModelStreamInferResponse {
                    error_message: String::new(),
                    infer_response: Some(response(model, id, Some(text), last && i + 1 == n)),
                }
            }
            Err(()) => {
                out.extend_from_slice(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
                continue;
            }
        };
        out.extend_from_slice(&kserve::frame(&m));
    }
    Bytes::from(out)
}

/// A whole gRPC answer: its message (if any), then its status in the trailers; or (no
/// message) the status alone, in the headers.
#[derive(Debug)]
pub(crate) struct GrpcWhole {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
    /// The status goes in the headers: the call has no message and no trailers.
    pub(crate) headers_only: Option<HeaderMap>,
}

impl GrpcWhole {
    pub(crate) fn new(data: Option<Vec<u8>>, trailers: HeaderMap) -> Self {
        Self { data: data.map(Bytes::from), trailers: Some(trailers), headers_only: None }
    }

    pub(crate) fn status_only(code: u32, message: &str) -> Self {
        Self { data: None, trailers: None, headers_only: Some(status_headers(code, message)) }
    }

    /// The answer of a generation not streamed: the whole text in one response, as
    /// `ModelInfer` answers or (`stream_call`) as `ModelStreamInfer`'s one final response.
    pub(crate) fn unary(model: &str, id: &str, text: &str, stream_call: bool) -> Self {
        let frame = if stream_call {
            kserve::frame(&pb::ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(response(model, id, Some(text), true)),
            })
        } else {
            kserve::frame(&response(model, id, Some(text), false))
        };
        Self::new(Some(frame), status_headers(0, ""))
    }
}

impl http_body::Body for GrpcWhole {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        let f = match (this.data.take(), this.trailers.take()) {
            (Some(d), t) => {
                this.trailers = t;
                Some(http_body::Frame::data(d))
            }
            (None, Some(t)) => Some(http_body::Frame::trailers(t)),
            (None, None) => None,
        };
        std::task::Poll::Ready(f.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// The service's other calls: liveness, readiness and the model's metadata (`None`: not
/// one of them).
pub(crate) fn other_call(method: &str, body: &[u8], model: &str) -> Option<GrpcWhole> {
    let ok = |m: &dyn Fn() -> Vec<u8>| Some(GrpcWhole::new(Some(m()), status_headers(0, "")));
    let name = || -> Result<String, Refusal> {
        let r = pb::ModelReadyRequest::decode(message(body)?).map_err(|e| {
            refusal(StatusCode::BAD_REQUEST, "INTERNAL", format!("cannot parse the request: {e}"))
        })?;
        Ok(r.name)
    };
    match method {
        "ServerLive" => ok(&|| kserve::frame(&pb::ServerLiveResponse { live: true })),
        "ServerReady" => ok(&|| kserve::frame(&pb::ServerLiveResponse { live: true })),
        "ModelReady" => match name() {
            Ok(n) => ok(&|| kserve::frame(&pb::ModelReadyResponse { ready: n == model })),
            Err(r) => Some(refusal_answer(&r, false)),
        },
        "ModelMetadata" => match name() {
            Ok(n) if n == model => ok(&|| kserve::frame(&metadata(model))),
            Ok(n) => Some(GrpcWhole::status_only(
                5,
                &format!("Request for unknown model: '{n}' is not found"),
            )),
            Err(r) => Some(refusal_answer(&r, false)),
        },
        _ => None,
    }
}

fn metadata(model: &str) -> pb::ModelMetadataResponse {
    let t = |n: &str, d: &str, shape: Vec<i64>| pb::TensorMetadata {
        name: n.into(),
        datatype: d.into(),
        shape,
    };
    pb::ModelMetadataResponse {
        name: model.into(),
        versions: vec!["1".into()],
        platform: "ensemble".into(),
        inputs: INPUTS
            .iter()
            .chain(VLLM_INPUTS.iter().filter(|(n, _)| !INPUTS.iter().any(|(m, _)| m == n)))
            .map(|(n, d)| t(n, d, vec![-1, 1]))
            .collect(),
        outputs: vec![t(kserve::TEXT_OUTPUT, "BYTES", vec![-1, -1])],
    }
}
