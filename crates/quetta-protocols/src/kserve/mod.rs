//! KServe v2 over gRPC (`inference.GRPCInferenceService`, served by NVIDIA Triton with its
//! TensorRT-LLM, vLLM and Python backends, and by KServe): Triton's decoupled
//! `ModelStreamInfer`, one response per token or chunk, and the unary `ModelInfer`.
//!
//! gRPC is HTTP/2: a call is a POST to `/inference.GRPCInferenceService/METHOD` whose body
//! is length-prefixed protobuf messages (a flag byte, a 4-byte big-endian length), with the
//! call's status in the trailers (`grpc-status`, `grpc-message`). So the protocol is a
//! [`Wire`] over the shared HTTP transport like every other (HTTP/2 only, `h2c` for
//! `grpc://`): each response's arrival is its DATA frame's, stamped before any protobuf
//! is decoded, and the connection pool, timeouts and records are those of every protocol.
//! One call per request: the request message goes out and the stream is half-closed; the
//! server answers with responses until its final one, then the trailers.
//!
//! The request's tensors are those of one of two model layouts ([`Tensors`]): TensorRT-LLM's
//! ensemble (the default): `text_input` (BYTES [1,1]), `max_tokens` (INT32), `stream`
//! (BOOL), `min_length` (INT32) when lengths are forced, `temperature` and `top_p` (FP32)
//! and `random_seed` (UINT64) when given; or Triton's vLLM backend: `text_input`, `stream`,
//! `exclude_input_in_output` (BOOL, true) and `sampling_parameters`, a JSON string of vLLM's
//! sampling parameters (`max_tokens`, `min_tokens`, `ignore_eos`, `temperature`, `top_p`,
//! `seed`). Both answer in `text_output`. A
//! streamed request asks for an empty final response (`triton_enable_empty_final_response`,
//! as Triton's own clients do), which ends it; a response with `error_message` fails it in
//! Triton's words, and a call whose status is not OK fails in gRPC's.

pub mod pb;
mod read;

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http_body_util::Full;
use prost::Message;
use quetta_engine::{Delta, EngineError, EngineRequest, EventKind, Prompt};
use quetta_http::fetch::ApiKey;
use quetta_http::BodyDecoder;
use serde_json::{Map, Value};

use crate::common::prompt_text;
use crate::engine::{BodyContext, Encoded, Wire};
use pb::{
    InferParameter, InferRequestedOutputTensor, InferTensor, ModelInferRequest, ModelInferResponse,
    ModelStreamInferResponse, Parameter,
};

/// The gRPC service's path prefix.
pub const SERVICE: &str = "/inference.GRPCInferenceService";

/// The ensemble's output of generated text.
pub const TEXT_OUTPUT: &str = "text_output";

/// The `tensorrt_llm` model's output of generated token ids.
pub const IDS_OUTPUT: &str = "output_ids";

/// Asks a decoupled model for an empty response flagged final once it is done.
pub const EMPTY_FINAL: &str = "triton_enable_empty_final_response";

/// The parameter of a response that marks it as the request's last.
pub const FINAL: &str = "triton_final_response";

/// The tensors a model takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tensors {
    /// TensorRT-LLM's ensemble (`text_input`, `max_tokens`, `stream`, …).
    #[default]
    TensorRtLlm,
    /// Triton's vLLM backend (`text_input`, `stream`, `sampling_parameters`,
    /// `exclude_input_in_output`).
    Vllm,
    /// TensorRT-LLM's `tensorrt_llm` model, which takes and gives token ids (`input_ids`,
    /// `input_lengths`, `request_output_len`, `streaming`; `output_ids`).
    TokenIds,
}

impl Tensors {
    /// The input tensors every request sends (the others only when a run asks for them),
    /// which the pre-flight looks for in the model's metadata.
    pub fn always_sent(self) -> &'static [&'static str] {
        match self {
            Self::TensorRtLlm => &["text_input", "max_tokens", "stream"],
            Self::Vllm => {
                &["text_input", "stream", "sampling_parameters", "exclude_input_in_output"]
            }
            Self::TokenIds => &["input_ids", "input_lengths", "request_output_len", "streaming"],
        }
    }

    /// The output tensor the answer is read from.
    pub fn output(self) -> &'static str {
        match self {
            Self::TensorRtLlm | Self::Vllm => TEXT_OUTPUT,
            Self::TokenIds => IDS_OUTPUT,
        }
    }

    /// `trtllm`, `vllm` or `ids`.
    pub fn name(self) -> &'static str {
        match self {
            Self::TensorRtLlm => "trtllm",
            Self::Vllm => "vllm",
            Self::TokenIds => "ids",
        }
    }
}

/// KServe v2 over gRPC with one model layout's tensors.
#[derive(Debug, Default)]
pub struct KserveGrpc {
    pub tensors: Tensors,
}

/// One input tensor of shape [1,1] (or [1,n] for `n` elements) and its raw little-endian
/// contents.
fn tensor(req: &mut ModelInferRequest, name: &str, datatype: &str, raw: Vec<u8>) {
    req.inputs.push(InferTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![1, 1],
        ..InferTensor::default()
    });
    req.raw_input_contents.push(raw);
}

/// One BYTES element as the raw contents carry it: its length (4 bytes, little-endian),
/// then its bytes.
pub fn bytes_element(b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + b.len());
    v.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
    v.extend_from_slice(b);
    v
}

/// The elements of a raw BYTES tensor, or `None` when its lengths overrun it.
pub fn bytes_elements(mut raw: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let (len, rest) = raw.split_first_chunk::<4>()?;
        let n = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        if n > rest.len() {
            return None;
        }
        let (e, rest) = rest.split_at(n);
        out.push(e);
        raw = rest;
    }
    Some(out)
}

/// A protobuf message framed as gRPC sends it (uncompressed).
pub fn frame(msg: &impl Message) -> Vec<u8> {
    let len = msg.encoded_len();
    let mut v = Vec::with_capacity(5 + len);
    v.push(0);
    v.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    msg.encode(&mut v).expect("a Vec grows as needed");
    v
}

impl KserveGrpc {
    /// The `ModelInferRequest` of a request.
    pub fn request(
        &self,
        model: &str,
        req: &EngineRequest,
    ) -> Result<ModelInferRequest, EngineError> {
        let mut r = ModelInferRequest {
            model_name: model.into(),
            id: req.request_id.to_string(),
            ..ModelInferRequest::default()
        };
        if self.tensors == Tensors::TokenIds {
            return Self::token_ids(r, req);
        }
        let text = match &req.prompt {
            Prompt::TokenIds(_) => {
                return Err(EngineError::Request(
                    "KServe gRPC: the model takes text (text_input), not token ids".into(),
                ))
            }
            p => prompt_text(p, "KServe gRPC")?,
        };
        tensor(&mut r, "text_input", "BYTES", bytes_element(text.as_bytes()));
        if self.tensors == Tensors::Vllm {
            return Ok(Self::vllm(r, req));
        }
        if let Some(n) = req.max_tokens {
            tensor(&mut r, "max_tokens", "INT32", i32_le(n));
        }
        let min = if req.ignore_eos { req.max_tokens } else { req.min_tokens };
        if let Some(n) = min {
            tensor(&mut r, "min_length", "INT32", i32_le(n));
        }
        tensor(&mut r, "stream", "BOOL", vec![u8::from(req.stream)]);
        let s = &req.params.sampling;
        if let Some(t) = s.temperature {
            tensor(&mut r, "temperature", "FP32", (t as f32).to_le_bytes().to_vec());
        }
        if let Some(p) = s.top_p {
            tensor(&mut r, "top_p", "FP32", (p as f32).to_le_bytes().to_vec());
        }
        if let Some(seed) = s.seed {
            tensor(&mut r, "random_seed", "UINT64", seed.to_le_bytes().to_vec());
        }
        r.outputs
            .push(InferRequestedOutputTensor { name: TEXT_OUTPUT.into(), ..Default::default() });
        if req.stream {
            r.parameters.insert(EMPTY_FINAL.into(), InferParameter::bool(true));
        }
        Ok(r)
    }
}

impl KserveGrpc {
    /// A request to TensorRT-LLM's `tensorrt_llm` model: the prompt's token ids
    /// (`input_ids`, shape [1, n]) and their count, the length asked for, streaming, and
    /// `min_tokens` where the length is forced.
    fn token_ids(
        mut r: ModelInferRequest,
        req: &EngineRequest,
    ) -> Result<ModelInferRequest, EngineError> {
        let Prompt::TokenIds(ids) = &req.prompt else {
            return Err(EngineError::Request(
                "KServe gRPC: the tensorrt_llm model takes token ids (input_ids): give the workload a tokenizer and token-id prompts".into(),
            ));
        };
        let n = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let raw: Vec<u8> = ids.iter().flat_map(|&t| i32_le(t)).collect();
        r.inputs.push(InferTensor {
            name: "input_ids".into(),
            datatype: "INT32".into(),
            shape: vec![1, i64::from(n)],
            ..InferTensor::default()
        });
        r.raw_input_contents.push(raw);
        tensor(&mut r, "input_lengths", "INT32", i32_le(n));
        let max = req.max_tokens.ok_or_else(|| {
            EngineError::Request(
                "KServe gRPC: the tensorrt_llm model needs an output length (request_output_len)"
                    .into(),
            )
        })?;
        tensor(&mut r, "request_output_len", "INT32", i32_le(max));
        tensor(&mut r, "streaming", "BOOL", vec![u8::from(req.stream)]);
        if let Some(n) = if req.ignore_eos { req.max_tokens } else { req.min_tokens } {
            tensor(&mut r, "min_tokens", "INT32", i32_le(n));
        }
        r.outputs
            .push(InferRequestedOutputTensor { name: IDS_OUTPUT.into(), ..Default::default() });
        if req.stream {
            r.parameters.insert(EMPTY_FINAL.into(), InferParameter::bool(true));
        }
        Ok(r)
    }

    /// The rest of a request to Triton's vLLM backend: its sampling parameters as one JSON
    /// string.
    fn vllm(mut r: ModelInferRequest, req: &EngineRequest) -> ModelInferRequest {
        let mut sp = Map::new();
        if let Some(n) = req.max_tokens {
            sp.insert("max_tokens".into(), n.into());
        }
        if req.ignore_eos {
            sp.insert("ignore_eos".into(), true.into());
        }
        if let Some(n) = if req.ignore_eos { req.max_tokens } else { req.min_tokens } {
            sp.insert("min_tokens".into(), n.into());
        }
        let s = &req.params.sampling;
        if let Some(t) = s.temperature {
            sp.insert("temperature".into(), t.into());
        }
        if let Some(p) = s.top_p {
            sp.insert("top_p".into(), p.into());
        }
        if let Some(seed) = s.seed {
            sp.insert("seed".into(), seed.into());
        }
        tensor(&mut r, "stream", "BOOL", vec![u8::from(req.stream)]);
        let sp = Value::Object(sp).to_string();
        tensor(&mut r, "sampling_parameters", "BYTES", bytes_element(sp.as_bytes()));
        tensor(&mut r, "exclude_input_in_output", "BOOL", vec![1]);
        r.outputs
            .push(InferRequestedOutputTensor { name: TEXT_OUTPUT.into(), ..Default::default() });
        if req.stream {
            r.parameters.insert(EMPTY_FINAL.into(), InferParameter::bool(true));
        }
        r
    }
}

fn i32_le(n: u32) -> Vec<u8> {
    i32::try_from(n).unwrap_or(i32::MAX).to_le_bytes().to_vec()
}

impl Wire for KserveGrpc {
    fn name(&self) -> &'static str {
        "kserve-grpc"
    }

    fn path(&self, _model: &str, stream: bool) -> String {
        format!("{SERVICE}/{}", if stream { "ModelStreamInfer" } else { "ModelInfer" })
    }

    /// Not JSON: see [`Wire::encode`].
    fn body(
        &self,
        _ctx: &BodyContext<'_>,
        _req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        Ok(Map::new())
    }

    fn encode(&self, ctx: &BodyContext<'_>, req: &EngineRequest) -> Result<Encoded, EngineError> {
        if !req.params.extra_body.is_empty() {
            return Err(EngineError::Request(
                "KServe gRPC: a request body is protobuf, it takes no extra JSON fields".into(),
            ));
        }
        let body = frame(&self.request(ctx.model, req)?);
        Ok(Encoded { body, content_type: "application/grpc".into() })
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        let d = KserveDecoder::new(req.stream, req.capture_text, max_event_bytes);
        Box::new(if self.tensors == Tensors::TokenIds { d.token_ids() } else { d })
    }

    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("te", "trailers")]
    }
}

/// The name of a gRPC status code.
pub fn code_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code).ok().and_then(|c| NAMES.get(c)).copied().unwrap_or("UNKNOWN")
}

/// The error of a call whose status is not OK, in gRPC's words (`grpc-message` is
/// percent-encoded).
pub fn status_error(code: u32, message: &str) -> EngineError {
    let words = format!("{}: {}", code_name(code), percent_decode(message));
    match code {
        7 | 16 => EngineError::Auth(words),
        8 => EngineError::Throttled(words),
        3 => EngineError::Validation(words),
        _ => EngineError::ServerError(words),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The status of a header map that carries one (`grpc-status`, `grpc-message`): `None`
/// without a status, else `Ok` or the call's error.
fn status_of(h: &http::HeaderMap) -> Option<Result<(), EngineError>> {
    let code = h.get("grpc-status")?;
    let code = code.to_str().ok().and_then(|c| c.trim().parse::<u32>().ok());
    let msg = h.get("grpc-message").and_then(|m| m.to_str().ok()).unwrap_or("");
    Some(match code {
        Some(0) => Ok(()),
        Some(c) => Err(status_error(c, msg)),
        None => Err(EngineError::Protocol("a grpc-status that is not a number".into())),
    })
}

/// Decodes the answer of a KServe gRPC call: length-prefixed messages, split anywhere
/// across DATA frames, then the status in the trailers.
#[derive(Debug)]
pub struct KserveDecoder {
    stream: bool,
    capture: bool,
    max_message: usize,
    buf: Vec<u8>,
    /// The final response came: later messages are drained unread.
    final_seen: bool,
    /// The call ended with status OK (in the trailers, or in the headers of a call with
    /// no message).
    status_ok: bool,
    /// Every message decoded with prost (the check of the reading in place).
    prost_only: bool,
    /// The answer is token ids (`output_ids`), counted into the usage at the final
    /// response; `None`: text.
    ids: Option<u64>,
}

impl KserveDecoder {
    /// `stream`: the answer is `ModelStreamInfer`'s (else one `ModelInferResponse`);
    /// `max_message` bounds one message.
    pub fn new(stream: bool, capture: bool, max_message: usize) -> Self {
        Self {
            stream,
            capture,
            max_message,
            buf: Vec::new(),
            final_seen: false,
            status_ok: false,
            prost_only: false,
            ids: None,
        }
    }

    /// The decoder of an answer in token ids (`output_ids`, INT32): each response's ids
    /// are a chunk, and their count is the usage's output tokens.
    #[must_use]
    pub fn token_ids(mut self) -> Self {
        self.ids = Some(0);
        self
    }

    /// One message: read in place where it has the usual shape, else with prost.
    fn message(&mut self, m: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let fast = if self.prost_only || self.ids.is_some() {
            None
        } else if self.stream {
            read::stream_reply(m)
        } else {
            read::unary_reply(m)
        };
        match fast {
            Some(r) => self.reply(&r, out),
            None => self.decoded(m, out),
        }
    }

    fn reply(
        &mut self,
        r: &read::Reply<'_>,
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if !r.error.is_empty() {
            return Err(EngineError::ServerError(String::from_utf8_lossy(r.error).into_owned()));
        }
        if !r.has_response {
            return Ok(());
        }
        if let Some(raw) = r.text {
            let elements = bytes_elements(raw).ok_or_else(overrun)?;
            // one element of UTF-8, the usual: no copy unless the text is kept
            match (elements.as_slice(), elements.first().map(|e| std::str::from_utf8(e))) {
                ([_], Some(Ok(t))) => out(EventKind::Content(Delta::of(t, self.capture))),
                _ => {
                    let t = String::from_utf8_lossy(&elements.concat()).into_owned();
                    out(EventKind::Content(Delta::of(&t, self.capture)));
                }
            }
        }
        self.final_seen |= !self.stream || r.last;
        Ok(())
    }

    /// A message decoded whole with prost.
    fn decoded(&mut self, m: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let bad = |e: prost::DecodeError| EngineError::Protocol(format!("a bad message: {e}"));
        let r = if self.stream {
            let s = ModelStreamInferResponse::decode(m).map_err(bad)?;
            if !s.error_message.is_empty() {
                return Err(EngineError::ServerError(s.error_message));
            }
            let Some(r) = s.infer_response else { return Ok(()) };
            r
        } else {
            ModelInferResponse::decode(m).map_err(bad)?
        };
        let last = !self.stream
            || matches!(
                r.parameters.get(FINAL).and_then(|p| p.parameter_choice.as_ref()),
                Some(Parameter::BoolParam(true))
            );
        if let Some(total) = &mut self.ids {
            let ids = output_ids(&r)?;
            if let Some(ids) = ids.filter(|i| !i.is_empty()) {
                *total += ids.len() as u64;
                let t = ids.iter().fold(String::new(), |mut t, i| {
                    let _ = write!(t, "{i} ");
                    t
                });
                let mut d = Delta::of(&t, self.capture);
                d.bytes = u32::try_from(ids.len() * 4).unwrap_or(u32::MAX);
                out(EventKind::Content(d));
            }
            if last {
                out(EventKind::Usage(quetta_engine::Usage::tokens(None, Some(*total))));
            }
            self.final_seen |= last;
            return Ok(());
        }
        let text = output_text(&r)?;
        // a response with the output is a chunk of tokens; the empty final one is not
        if let Some(t) = text {
            out(EventKind::Content(Delta::of(&t, self.capture)));
        }
        self.final_seen |= last;
        Ok(())
    }
}

fn overrun() -> EngineError {
    EngineError::Protocol("text_output: element lengths overrun the tensor".into())
}

/// For the fuzz targets and tests: read one message both in place and with prost alone, and
/// panic if the reading in place answers where prost would answer differently (other
/// events, another end, or an error).
#[doc(hidden)]
pub fn check_reader_against_prost(stream: bool, m: &[u8]) {
    let taken =
        if stream { read::stream_reply(m).is_some() } else { read::unary_reply(m).is_some() };
    if !taken {
        return;
    }
    let run = |prost_only: bool| {
        let mut d = KserveDecoder::new(stream, true, usize::MAX);
        d.prost_only = prost_only;
        let mut events = Vec::new();
        let r = d.message(m, &mut |k| events.push(k));
        (events, r, d.final_seen)
    };
    let (fast, prost) = (run(false), run(true));
    assert_eq!(fast, prost, "read in place and with prost differ on {m:?}");
    assert!(
        !matches!(&prost.1, Err(EngineError::Protocol(e)) if e.starts_with("a bad message")),
        "read in place what prost refuses: {:?}",
        prost.1
    );
}

/// The text of a response's `text_output` (its elements joined), `None` without it.
/// The token ids of `output_ids` (INT32, raw little-endian or `int_contents`), if the
/// response has the output.
fn output_ids(r: &ModelInferResponse) -> Result<Option<Vec<i32>>, EngineError> {
    let Some(i) = r.outputs.iter().position(|o| o.name == IDS_OUTPUT) else {
        return Ok(None);
    };
    Ok(Some(match (r.raw_output_contents.get(i), &r.outputs[i].contents) {
        (Some(raw), _) => {
            if raw.len() % 4 != 0 {
                return Err(EngineError::Protocol(format!(
                    "output_ids: {} bytes are no whole number of INT32 ids",
                    raw.len()
                )));
            }
            raw.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        (None, Some(c)) => c.int_contents.clone(),
        (None, None) => Vec::new(),
    }))
}

fn output_text(r: &ModelInferResponse) -> Result<Option<String>, EngineError> {
    let Some(i) = r.outputs.iter().position(|o| o.name == TEXT_OUTPUT) else {
        return Ok(None);
    };
    let elements: Vec<Vec<u8>> = match (r.raw_output_contents.get(i), &r.outputs[i].contents) {
        (Some(raw), _) => {
            bytes_elements(raw).ok_or_else(overrun)?.into_iter().map(<[u8]>::to_vec).collect()
        }
        (None, Some(c)) => c.bytes_contents.clone(),
        (None, None) => return Ok(Some(String::new())),
    };
    let text = elements.concat();
    Ok(Some(String::from_utf8_lossy(&text).into_owned()))
}

impl BodyDecoder for KserveDecoder {
    fn on_headers(&mut self, headers: &http::HeaderMap) -> Result<(), EngineError> {
        // a call refused at once answers with its status in the headers (trailers-only)
        match status_of(headers) {
            Some(Err(e)) => Err(e),
            Some(Ok(())) => {
                self.status_ok = true;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn on_data(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        // (the buffer is taken out while its messages are read, and put back with what is
        // left of it: a message is read in place, never copied)
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(data);
        let mut at = 0;
        let r = loop {
            if self.final_seen {
                // the answer is complete: what follows is drained unread
                at = buf.len();
                break Ok(());
            }
            let Some(head) = buf.get(at..at + 5) else { break Ok(()) };
            if head[0] != 0 {
                break Err(EngineError::Protocol(
                    "a compressed gRPC message (none was asked for)".into(),
                ));
            }
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > self.max_message {
                break Err(EngineError::Protocol(format!(
                    "a gRPC message of {len} bytes (at most {})",
                    self.max_message
                )));
            }
            let Some(m) = buf.get(at + 5..at + 5 + len) else { break Ok(()) };
            at += 5 + len;
            if let Err(e) = self.message(m, out) {
                break Err(e);
            }
        };
        buf.drain(..at);
        self.buf = buf;
        r
    }

    fn on_trailers(&mut self, trailers: &http::HeaderMap) -> Result<(), EngineError> {
        match status_of(trailers) {
            Some(Err(e)) => Err(e),
            Some(Ok(())) => {
                // the call completed: a model that is not decoupled sends no final flag
                self.status_ok = true;
                Ok(())
            }
            None => Err(EngineError::Protocol("the call ended without a grpc-status".into())),
        }
    }

    fn on_end(&mut self, _out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        if self.buf.is_empty() || self.final_seen {
            Ok(())
        } else {
            Err(EngineError::Protocol(format!(
                "the body ended inside a gRPC message ({} bytes of it)",
                self.buf.len()
            )))
        }
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.on_data(body, out)?;
        self.on_end(out)
    }

    fn is_done(&self) -> bool {
        self.final_seen || self.status_ok
    }

    fn finish_reason(&self) -> Option<String> {
        None
    }
}

/// Why the pre-flight check refused a server.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PreflightError {
    #[error("{call}: {error}")]
    Call { call: &'static str, error: EngineError },
    #[error("the server is not live (ServerLive)")]
    NotLive,
    #[error("model {0:?} is not ready (ModelReady)")]
    NotReady(String),
    #[error("model {model:?} has no {direction} tensor {tensor:?} (ModelMetadata lists {listed})")]
    MissingTensor { model: String, direction: &'static str, tensor: String, listed: String },
}

/// One unary call of the service and its decoded answer.
async fn call<R: Message + Default>(
    transport: &quetta_http::Transport,
    base: &str,
    key: Option<&ApiKey>,
    method: &'static str,
    msg: &impl Message,
) -> Result<R, PreflightError> {
    let fail = |error| PreflightError::Call { call: method, error };
    let uri = quetta_openai::join_url(base, &format!("{SERVICE}/{method}"))
        .map_err(|e| fail(EngineError::Request(e.to_string())))?;
    let mut r =
        http::Request::post(uri).header(CONTENT_TYPE, "application/grpc").header("te", "trailers");
    if let Some(k) = key {
        r = r.header(AUTHORIZATION, k.bearer().map_err(fail)?);
    }
    let req = r
        .body(Full::new(Bytes::from(frame(msg))))
        .map_err(|e| fail(EngineError::Request(e.to_string())))?;
    let got = transport.fetch(req, Duration::from_secs(10), 1 << 20).await.map_err(fail)?;
    if got.status != 200 {
        return Err(fail(EngineError::HttpStatus {
            status: got.status,
            body_excerpt: String::from_utf8_lossy(&got.body).chars().take(200).collect(),
            retry_after: None,
        }));
    }
    for h in [Some(&got.headers), got.trailers.as_ref()].into_iter().flatten() {
        if let Some(Err(e)) = status_of(h) {
            return Err(fail(e));
        }
    }
    let m = got.body.get(5..).ok_or_else(|| fail(EngineError::Protocol("no answer".into())))?;
    R::decode(m).map_err(|e| fail(EngineError::Protocol(format!("a bad message: {e}"))))
}

/// The pre-flight check of a KServe server at `base` (`http://` or `https://`), before any
/// request is measured: it is live,
/// the model is ready, and the model's metadata lists every tensor the requests of the
/// layout send and its output; a missing one is refused, named.
pub async fn preflight(
    transport: &quetta_http::Transport,
    base: &str,
    key: Option<&ApiKey>,
    model: &str,
    tensors: Tensors,
) -> Result<(), PreflightError> {
    let live: pb::ServerLiveResponse =
        call(transport, base, key, "ServerLive", &pb::ServerLiveRequest {}).await?;
    if !live.live {
        return Err(PreflightError::NotLive);
    }
    let named = pb::ModelReadyRequest { name: model.into(), version: String::new() };
    let ready: pb::ModelReadyResponse = call(transport, base, key, "ModelReady", &named).await?;
    if !ready.ready {
        return Err(PreflightError::NotReady(model.into()));
    }
    let named = pb::ModelMetadataRequest { name: model.into(), version: String::new() };
    let meta: pb::ModelMetadataResponse =
        call(transport, base, key, "ModelMetadata", &named).await?;
    let check = |direction, have: &[pb::TensorMetadata], want: &[&str]| {
        let listed = have.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ");
        match want.iter().find(|w| !have.iter().any(|t| t.name == **w)) {
            Some(t) => Err(PreflightError::MissingTensor {
                model: model.into(),
                direction,
                tensor: (*t).into(),
                listed,
            }),
            None => Ok(()),
        }
    };
    check("input", &meta.inputs, tensors.always_sent())?;
    check("output", &meta.outputs, &[tensors.output()])
}

#[cfg(test)]
mod tests;
