//! Embeddings, pooling, rerank and score: plain JSON over HTTP, one answer per request,
//! never streamed. What they measure is the request's latency, and per input (a batch's
//! texts, a ranking's documents) the latency divided among them; the inputs and input
//! tokens per second; input tokens from the answer's `usage` where it has one
//! (docs/METRICS.md, Protocols).
//!
//! - OpenAI embeddings (`/v1/embeddings`; Infinity's `/embeddings`): `input` is a text, a
//!   list of texts, or token ids; the answer's `data` holds one embedding per input;
//! - chat embeddings (vLLM: `/v1/embeddings` with `messages`, text and images);
//! - vLLM's `/pooling` (`data[].data`);
//! - rerank (`/v1/rerank`, the Cohere/Jina shape vLLM and llama.cpp serve): `query` and
//!   `documents`, `results` with one score per document; Hugging Face TEI's `/rerank`
//!   (`texts`, an array of scores);
//! - vLLM's `/score` (`text_1` the query, `text_2` the documents; `data` with one score per
//!   document).
//!
//! An answer with another number of results than inputs is refused: the server did not do
//! what was measured.

use quetta_engine::{
    ContentPart, EngineError, EngineRequest, EventKind, Message, MessageContent, Prompt,
    RequestKind, Usage,
};
use quetta_http::{BodyDecoder, EventDecoder, SseBody};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::common::{bad_json, cannot_send, error_words, is_error, prompt_messages};
use crate::engine::{BodyContext, Wire};

/// Where an answer keeps its results, one per input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Results {
    /// `data`: embeddings, pooled outputs, scores.
    Data,
    /// `results`: the Cohere/Jina rerank shape.
    Ranked,
    /// The answer is the array itself (TEI's rerank).
    Array,
}

/// How an embeddings request carries its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `input`: a text, texts, or token ids.
    Input,
    /// `messages`, text and images as given.
    Chat,
    /// vLLM's CLIP form: `messages`; a message with an image keeps the image alone.
    Clip,
    /// vLLM's VLM2Vec form: `messages`, images first; even requests ask "Represent the
    /// given image.", odd ones "Represent the given image with the following question:"
    /// and the text.
    Vlm2Vec,
    /// Infinity's CLIP form: `input` is the image's URL with `modality: image` where the
    /// prompt has an image, else the text.
    InfinityClip,
}

/// An embeddings or pooling protocol.
#[derive(Debug, Clone, Copy)]
pub struct Embed {
    name: &'static str,
    path: &'static str,
    form: Form,
}

impl Embed {
    /// OpenAI's `/v1/embeddings`.
    pub const OPENAI: Embed =
        Embed { name: "openai-embeddings", path: "/v1/embeddings", form: Form::Input };
    /// vLLM's chat form of `/v1/embeddings` (messages, with images).
    pub const CHAT: Embed =
        Embed { name: "openai-embeddings-chat", path: "/v1/embeddings", form: Form::Chat };
    /// vLLM's CLIP form of the chat embeddings.
    pub const CLIP: Embed =
        Embed { name: "openai-embeddings-clip", path: "/v1/embeddings", form: Form::Clip };
    /// vLLM's VLM2Vec form of the chat embeddings.
    pub const VLM2VEC: Embed =
        Embed { name: "openai-embeddings-vlm2vec", path: "/v1/embeddings", form: Form::Vlm2Vec };
    /// Infinity's `/embeddings`.
    pub const INFINITY: Embed =
        Embed { name: "infinity-embeddings", path: "/embeddings", form: Form::Input };
    /// Infinity's CLIP form (an image's URL, `modality: image`).
    pub const INFINITY_CLIP: Embed =
        Embed { name: "infinity-embeddings-clip", path: "/embeddings", form: Form::InfinityClip };
    /// vLLM's `/pooling`.
    pub const POOLING: Embed = Embed { name: "vllm-pooling", path: "/pooling", form: Form::Input };

    /// Whether a request carries one conversation (not a batch of inputs).
    pub fn is_chat(&self) -> bool {
        matches!(self.form, Form::Chat | Form::Clip | Form::Vlm2Vec)
    }
}

fn chat_content(c: &MessageContent) -> Value {
    match c {
        MessageContent::Text(t) => Value::String(t.clone()),
        MessageContent::Parts(parts) => serde_json::to_value(parts).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

fn image_of(m: &Message) -> Option<&str> {
    match &m.content {
        MessageContent::Parts(p) => p.iter().find_map(|p| match p {
            ContentPart::ImageUrl { image_url } => Some(image_url.url.as_str()),
            _ => None,
        }),
        _ => None,
    }
}

/// A message's content in the CLIP and VLM2Vec forms (`id` picks VLM2Vec's prompt).
fn vision_content(form: Form, m: &Message, id: u64) -> Value {
    let Some(url) = image_of(m) else { return chat_content(&m.content) };
    let image = json!({"type": "image_url", "image_url": {"url": url}});
    match form {
        Form::Clip => json!([image]),
        _ => {
            let text = if id % 2 == 0 {
                "Represent the given image.".to_owned()
            } else {
                format!(
                    "Represent the given image with the following question: {}",
                    m.text_content()
                )
            };
            json!([image, {"type": "text", "text": text}])
        }
    }
}

impl Wire for Embed {
    fn name(&self) -> &'static str {
        self.name
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        self.path.into()
    }

    fn streams(&self) -> bool {
        false
    }

    fn kind(&self) -> RequestKind {
        RequestKind::Embed
    }

    fn body(
        &self,
        ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let mut b = Map::new();
        b.insert("model".into(), json!(ctx.model));
        if self.is_chat() {
            let msgs = prompt_messages(&req.prompt, self.name)?;
            let msgs: Vec<Value> = msgs
                .iter()
                .map(|m| {
                    let content = match self.form {
                        Form::Chat => chat_content(&m.content),
                        f => vision_content(f, m, req.request_id),
                    };
                    json!({"role": m.role, "content": content})
                })
                .collect();
            b.insert("messages".into(), Value::Array(msgs));
        } else {
            let image = match (&req.prompt, self.form) {
                (Prompt::Chat(m), Form::InfinityClip) => m.iter().find_map(image_of),
                _ => None,
            };
            let input = match (&req.prompt, image) {
                (_, Some(url)) => {
                    b.insert("modality".into(), json!("image"));
                    json!(url)
                }
                (Prompt::Text(t), _) => json!(t),
                (Prompt::TokenIds(ids), _) => json!(ids),
                (Prompt::Inputs(texts), _) => json!(texts),
                (Prompt::Chat(m), _) => json!(m
                    .iter()
                    .map(quetta_engine::Message::text_content)
                    .collect::<Vec<_>>()
                    .join("\n")),
                (other, _) => return Err(cannot_send(self.name, other)),
            };
            b.insert("input".into(), input);
            if self.path != "/pooling" {
                b.insert("encoding_format".into(), json!("float"));
            }
        }
        if let (Some(sid), Some(f)) = (&req.session_id, ctx.session_body_field) {
            if self.name == Embed::OPENAI.name {
                b.insert(f.into(), Value::String(sid.clone()));
            }
        }
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        let expect = if self.is_chat() { 1 } else { req.prompt.input_count() };
        Box::new(SseBody::new(max_event_bytes, PooledDecoder::new(Results::Data, expect)))
    }
}

/// A rerank or score protocol.
#[derive(Debug, Clone, Copy)]
pub struct Rank {
    name: &'static str,
    path: &'static str,
    /// The names of the query's and the documents' fields.
    fields: (&'static str, &'static str),
    results: Results,
}

impl Rank {
    /// The Cohere/Jina shape vLLM and llama.cpp serve at `/v1/rerank`.
    pub const RERANK: Rank = Rank {
        name: "vllm-rerank",
        path: "/v1/rerank",
        fields: ("query", "documents"),
        results: Results::Ranked,
    };
    /// Hugging Face TEI's `/rerank`.
    pub const TEI: Rank = Rank {
        name: "tei-rerank",
        path: "/rerank",
        fields: ("query", "texts"),
        results: Results::Array,
    };
    /// vLLM's `/score`.
    pub const SCORE: Rank = Rank {
        name: "vllm-score",
        path: "/score",
        fields: ("text_1", "text_2"),
        results: Results::Data,
    };
}

impl Wire for Rank {
    fn name(&self) -> &'static str {
        self.name
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        self.path.into()
    }

    fn streams(&self) -> bool {
        false
    }

    fn kind(&self) -> RequestKind {
        RequestKind::Rank
    }

    fn body(
        &self,
        ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let Prompt::Rank { query, documents } = &req.prompt else {
            return Err(cannot_send(self.name, &req.prompt));
        };
        let mut b = Map::new();
        b.insert("model".into(), json!(ctx.model));
        b.insert(self.fields.0.into(), json!(query));
        b.insert(self.fields.1.into(), json!(documents));
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        let d = PooledDecoder::new(self.results, req.prompt.input_count());
        Box::new(SseBody::new(max_event_bytes, d))
    }
}

/// An answer as far as it is read: its results counted, its usage, an error.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    data: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    results: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// Reads one whole JSON answer: its results counted against the inputs, its usage.
#[derive(Debug)]
pub struct PooledDecoder {
    results: Results,
    expect: u32,
    done: bool,
}

impl PooledDecoder {
    fn new(results: Results, expect: u32) -> Self {
        Self { results, expect, done: false }
    }

    /// A body that is not the answer's JSON: the server's error words if it has them.
    fn refused(body: &[u8]) -> EngineError {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => match v.get("error").filter(|e| is_error(e)) {
                Some(e) => EngineError::ServerError(error_words(e)),
                None => EngineError::Protocol(format!(
                    "not the answer's shape: {}",
                    quetta_http::excerpt(&String::from_utf8_lossy(body), 200)
                )),
            },
            Err(e) => bad_json(&e, body),
        }
    }
}

impl EventDecoder for PooledDecoder {
    fn on_event(
        &mut self,
        _event_type: &[u8],
        _data: &[u8],
        _out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        Err(EngineError::Protocol("this protocol's answers are not streamed".into()))
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        // The results are counted, not read: an embedding's numbers are skipped unparsed.
        let (items, usage) = if self.results == Results::Array {
            match serde_json::from_slice::<Vec<IgnoredAny>>(body) {
                Ok(v) => (Some(v.len()), None),
                Err(_) => return Err(Self::refused(body)),
            }
        } else {
            let a: Answer = serde_json::from_slice(body).map_err(|_| Self::refused(body))?;
            if let Some(e) = a.error.filter(is_error) {
                return Err(EngineError::ServerError(error_words(&e)));
            }
            let items = match self.results {
                Results::Data => a.data,
                _ => a.results,
            };
            (items.map(|v| v.len()), a.usage)
        };
        let Some(items) = items else {
            let what = match self.results {
                Results::Array => "a list of results",
                Results::Data => "`data`",
                Results::Ranked => "`results`",
            };
            return Err(EngineError::Protocol(format!("the answer has no {what}")));
        };
        if items != self.expect as usize {
            return Err(EngineError::Protocol(format!(
                "the answer has {items} results for {} inputs",
                self.expect
            )));
        }
        if let Some(u) = usage {
            out(EventKind::Usage(Usage::tokens(u.prompt_tokens.or(u.total_tokens), None)));
        }
        self.done = true;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(
        results: Results,
        expect: u32,
        body: &str,
    ) -> (Vec<EventKind>, Result<(), EngineError>) {
        let mut d = PooledDecoder::new(results, expect);
        let mut v = Vec::new();
        let r = d.decode_full(body.as_bytes(), &mut |k| v.push(k));
        (v, r)
    }

    #[test]
    fn the_vision_forms_are_vllms() {
        use quetta_engine::ImageRef;
        let ctx = BodyContext {
            model: "m",
            include_usage: false,
            session_body_field: None,
            max_tokens_field: "max_tokens",
        };
        let parts = vec![
            ContentPart::Text { text: "what is it".into() },
            ContentPart::ImageUrl {
                image_url: ImageRef { url: "data:image/png;base64,AA".into() },
            },
        ];
        let msg = Message { role: "user".into(), content: MessageContent::Parts(parts) };
        let req = |id| EngineRequest::new(id, Prompt::Chat(vec![msg.clone()]));
        let content =
            |e: Embed, id| e.body(&ctx, &req(id)).unwrap()["messages"][0]["content"].clone();
        let image = json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}});
        assert_eq!(content(Embed::CLIP, 0), json!([image]));
        assert_eq!(
            content(Embed::VLM2VEC, 0),
            json!([image, {"type": "text", "text": "Represent the given image."}])
        );
        assert_eq!(
            content(Embed::VLM2VEC, 1),
            json!([image, {"type": "text", "text": "Represent the given image with the following question: what is it"}])
        );
        let b = Embed::INFINITY_CLIP.body(&ctx, &req(0)).unwrap();
        assert_eq!(
            (b["input"].as_str(), b["modality"].as_str()),
            (Some("data:image/png;base64,AA"), Some("image"))
        );
        let text = EngineRequest::new(0, Prompt::Inputs(vec!["a".into(), "b".into()]));
        assert_eq!(Embed::INFINITY_CLIP.body(&ctx, &text).unwrap()["input"], json!(["a", "b"]));
    }

    #[test]
    fn results_are_counted_against_the_inputs() {
        let (ev, r) = decode(
            Results::Data,
            2,
            r#"{"object":"list","data":[{"embedding":[0.1],"index":0},{"embedding":[0.2],"index":1}],"usage":{"prompt_tokens":9,"total_tokens":9}}"#,
        );
        r.unwrap();
        assert_eq!(ev, vec![EventKind::Usage(Usage::tokens(Some(9), None))]);
        let (_, r) = decode(Results::Data, 3, r#"{"data":[{"embedding":[0.1]}]}"#);
        assert_eq!(r, Err(EngineError::Protocol("the answer has 1 results for 3 inputs".into())));
        let (ev, r) = decode(
            Results::Ranked,
            2,
            r#"{"model":"m","usage":{"total_tokens":30},"results":[{"index":1,"relevance_score":0.9},{"index":0,"relevance_score":0.1}]}"#,
        );
        r.unwrap();
        assert_eq!(ev, vec![EventKind::Usage(Usage::tokens(Some(30), None))]);
        let (ev, r) =
            decode(Results::Array, 2, r#"[{"index":0,"score":0.9},{"index":1,"score":0.2}]"#);
        r.unwrap();
        assert!(ev.is_empty(), "TEI gives no usage");
        let (_, r) = decode(
            Results::Data,
            1,
            r#"{"error":{"message":"input is too long","type":"BadRequestError"}}"#,
        );
        assert_eq!(r, Err(EngineError::ServerError("BadRequestError: input is too long".into())));
    }
}
