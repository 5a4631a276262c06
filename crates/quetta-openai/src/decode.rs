//! Decoding OpenAI-style response bodies into engine events.
//!
//! [`ChunkDecoder`] turns the data of one SSE event (one `chat.completion.chunk` or
//! `text_completion` chunk) into [`EventKind`]s. It understands the dialects of vLLM,
//! SGLang, TGI's messages API, llama.cpp and OpenAI: `delta.content`, `choices[].text`,
//! `delta.reasoning_content` / `delta.reasoning`, `delta.tool_calls`, role-only and empty
//! chunks, a final usage chunk (with or without `choices`), usage inside the finishing
//! chunk, `event: error` and `{"error": ...}` objects mid-stream.
//!
//! JSON strings are borrowed from the frame where possible; text is only copied out when
//! the request asked to capture it.

use std::borrow::Cow;

use quetta_engine::{Delta, EngineError, EventKind, ServerTiming, Usage};
use serde::Deserialize;

use crate::fast::{self, DeltaFields};

/// One choice as the decoder reads it, from serde's structs or from the scanner.
struct View<'a> {
    text: Option<&'a str>,
    /// `delta`, else `message`.
    delta: Option<DeltaFields<'a>>,
    /// The names and arguments of its tool calls, concatenated.
    tool_text: Option<String>,
    finish_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    /// llama.cpp's own timing of the request, in its final chunk.
    #[serde(default)]
    timings: Option<TimingsJson>,
}

/// llama.cpp's `timings` object (in the last chunk of its OpenAI-compatible answers, and
/// in the answers of its native `/completion`, Responses and Messages endpoints).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct TimingsJson {
    #[serde(default)]
    pub prompt_n: Option<u64>,
    #[serde(default)]
    pub prompt_ms: Option<f64>,
    #[serde(default)]
    pub predicted_n: Option<u64>,
    #[serde(default)]
    pub predicted_per_token_ms: Option<f64>,
    /// Prompt tokens the server took from its cache.
    #[serde(default)]
    pub cache_n: Option<u64>,
}

impl TimingsJson {
    /// The server's timing event (times that are not finite and non-negative are left out).
    pub fn to_server_timing(self) -> ServerTiming {
        let finite = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
        ServerTiming::new(finite(self.prompt_ms), finite(self.predicted_per_token_ms))
            .with_counts(self.prompt_n, self.predicted_n)
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaJson<'a>>,
    /// Non-streaming chat responses.
    #[serde(default, borrow)]
    message: Option<DeltaJson<'a>>,
    /// Completions responses.
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaJson<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallJson<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallJson<'a> {
    #[serde(default, borrow)]
    function: Option<FunctionJson<'a>>,
}

#[derive(Deserialize)]
struct FunctionJson<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        Usage::tokens(u.prompt_tokens, u.completion_tokens)
            .with_cached(u.prompt_tokens_details.and_then(|d| d.cached_tokens))
            .with_reasoning(u.completion_tokens_details.and_then(|d| d.reasoning_tokens))
    }
}

/// Decodes the SSE events of one response. See the module documentation.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    capture_text: bool,
    /// `data: [DONE]` was seen.
    pub done: bool,
    /// The last `finish_reason` seen.
    pub finish_reason: Option<String>,
}

fn delta(text: &str, capture: bool) -> Delta {
    Delta::of(text, capture)
}

fn error_message(v: &serde_json::Value) -> String {
    let msg = v
        .get("message")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| v.to_string(), str::to_owned);
    excerpt(&msg, 512)
}

pub use quetta_http::excerpt;

impl ChunkDecoder {
    /// A decoder; `capture_text` keeps delta text in the events.
    pub fn new(capture_text: bool) -> Self {
        Self { capture_text, ..Self::default() }
    }

    /// Decode one SSE event. Events are passed to `out` in order. An `Err` is terminal.
    pub fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut impl FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        if event_type == b"error" {
            return Err(EngineError::ServerError(excerpt(&String::from_utf8_lossy(data), 512)));
        }
        // The common delta chunk, without serde (see `fast`); anything else: serde.
        if let Some(scanned) = fast::scan(data) {
            let choices = scanned.choices();
            self.decode_views(
                choices.iter().map(|ch| View {
                    text: ch.text,
                    delta: ch.delta,
                    tool_text: None,
                    finish_reason: ch.finish_reason,
                }),
                out,
            );
            return Ok(());
        }
        self.decode_serde(data, out)
    }

    /// Decode one chunk with serde (every shape the scanner leaves).
    fn decode_serde(
        &mut self,
        data: &[u8],
        out: &mut impl FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let chunk: Chunk<'_> = serde_json::from_slice(data).map_err(|e| {
            EngineError::Protocol(format!(
                "bad JSON in SSE event ({e}): {}",
                excerpt(&String::from_utf8_lossy(data), 200)
            ))
        })?;
        if let Some(err) = chunk.error {
            return Err(EngineError::ServerError(error_message(&err)));
        }
        self.decode_choices(chunk.choices.as_deref().unwrap_or(&[]), out);
        if let Some(u) = chunk.usage {
            out(EventKind::Usage(u.into()));
        }
        if let Some(t) = chunk.timings {
            out(EventKind::ServerTiming(t.to_server_timing()));
        }
        Ok(())
    }

    fn decode_choices(&mut self, choices: &[Choice<'_>], out: &mut impl FnMut(EventKind)) {
        self.decode_views(
            choices.iter().map(|ch| {
                let d = ch.delta.as_ref().or(ch.message.as_ref());
                View {
                    text: ch.text.as_deref(),
                    delta: d.map(|d| DeltaFields {
                        content: d.content.as_deref(),
                        reasoning_content: d.reasoning_content.as_deref(),
                        reasoning: d.reasoning.as_deref(),
                    }),
                    tool_text: d.and_then(|d| d.tool_calls.as_ref()).map(|calls| {
                        let mut text = String::new();
                        for f in calls.iter().filter_map(|c| c.function.as_ref()) {
                            text.push_str(f.name.as_deref().unwrap_or(""));
                            text.push_str(f.arguments.as_deref().unwrap_or(""));
                        }
                        text
                    }),
                    finish_reason: ch.finish_reason.as_deref(),
                }
            }),
            out,
        );
    }

    /// Events of a chunk's choices, in order: per choice its completion text, reasoning,
    /// content and tool calls; `Empty` when the chunk has choices but none carries a token.
    fn decode_views<'a>(
        &mut self,
        choices: impl Iterator<Item = View<'a>>,
        out: &mut impl FnMut(EventKind),
    ) {
        let c = self.capture_text;
        let mut any_token = false;
        let mut any_choice = false;
        for ch in choices {
            any_choice = true;
            if let Some(t) = ch.text.filter(|t| !t.is_empty()) {
                out(EventKind::Content(delta(t, c)));
                any_token = true;
            }
            if let Some(d) = ch.delta {
                if let Some(t) = d.reasoning_content.or(d.reasoning) {
                    if !t.is_empty() {
                        out(EventKind::Reasoning(delta(t, c)));
                        any_token = true;
                    }
                }
                if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                    out(EventKind::Content(delta(t, c)));
                    any_token = true;
                }
            }
            if let Some(text) = ch.tool_text {
                out(EventKind::ToolCall(delta(&text, c)));
                any_token = true;
            }
            if let Some(fr) = ch.finish_reason {
                self.finish_reason = Some(fr.to_owned());
            }
        }
        if any_choice && !any_token {
            out(EventKind::Empty);
        }
    }

    /// Decode a whole non-streaming response body.
    pub fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut impl FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.on_event(b"", body, out)
    }
}

impl quetta_http::EventDecoder for ChunkDecoder {
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        ChunkDecoder::on_event(self, event_type, data, &mut |k| out(k))
    }
    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        ChunkDecoder::decode_full(self, body, &mut |k| out(k))
    }
    fn is_done(&self) -> bool {
        self.done
    }
    fn finish_reason(&self) -> Option<String> {
        self.finish_reason.clone()
    }
}

/// One event decoded by a fresh decoder, through the scanner where it answers or (with
/// `serde_only`) through serde alone: the result, the events and the finish reason.
fn decode_one(
    data: &[u8],
    serde_only: bool,
) -> (Result<(), EngineError>, Vec<EventKind>, Option<String>) {
    let mut d = ChunkDecoder::new(true);
    let mut v = Vec::new();
    let r = if serde_only {
        d.decode_serde(data, &mut |e| v.push(e))
    } else {
        d.on_event(b"", data, &mut |e| v.push(e))
    };
    (r, v, d.finish_reason)
}

/// For the fuzz targets and tests: decode `data` as one SSE event both through the scanner
/// and through serde alone, and panic if the scanner answers where serde would answer
/// differently (other events, another finish reason, or an error).
#[doc(hidden)]
pub fn check_scanner_against_serde(data: &[u8]) {
    if fast::scan(data).is_none() {
        return;
    }
    let (fast, serde) = (decode_one(data, false), decode_one(data, true));
    assert_eq!(fast, serde, "scanner and serde differ on {:?}", String::from_utf8_lossy(data));
    assert!(serde.0.is_ok(), "the scanner took what serde refuses: {:?}", serde.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(data: &str) -> Vec<EventKind> {
        let mut d = ChunkDecoder::new(true);
        let mut v = Vec::new();
        d.on_event(b"", data.as_bytes(), &mut |e| v.push(e)).unwrap();
        v
    }

    #[test]
    fn role_only_chunk_is_empty_and_content_is_a_token() {
        assert_eq!(
            kinds(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#),
            vec![EventKind::Empty]
        );
        assert_eq!(
            kinds(r#"{"choices":[{"delta":{"content":"h\u00e9"}}]}"#),
            vec![EventKind::Content(Delta::text("hé"))]
        );
    }

    #[test]
    fn usage_with_cached_tokens() {
        let k = kinds(
            r#"{"choices":[],"usage":{"prompt_tokens":32,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":24}}}"#,
        );
        assert_eq!(
            k,
            vec![EventKind::Usage(Usage::tokens(Some(32), Some(4)).with_cached(Some(24)))]
        );
    }

    /// Generated chunks in the shapes servers send and around them (nulls, escapes, unicode,
    /// unknown and nested fields, usage, tool calls, wrong types, duplicates, whitespace):
    /// wherever the scanner answers, its events and finish reason are serde's.
    mod scanner_matches_serde {
        use super::*;
        use proptest::prelude::*;

        fn string() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => "[ a-zA-Z0-9.,!?/-]{0,12}",
                1 => Just(String::new()),
                1 => "[a-z]{0,3}(\\\\n|\\\\\"|\\\\u00e9|\\\\t)[a-z]{0,3}",
                1 => "[ée€😀中 ]{1,4}",
            ]
            .prop_map(|s| format!("\"{s}\""))
        }

        fn scalar() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("null".to_string()),
                Just("true".to_string()),
                Just("false".to_string()),
                Just("0".to_string()),
                Just("-12.5e3".to_string()),
                Just("1732000000".to_string()),
                string(),
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            scalar().prop_recursive(3, 12, 3, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3)
                        .prop_map(|v| format!("[{}]", v.join(","))),
                    prop::collection::vec(("[a-z]{1,4}", inner), 0..3).prop_map(|v| {
                        let f: Vec<String> =
                            v.into_iter().map(|(k, x)| format!("\"{k}\":{x}")).collect();
                        format!("{{{}}}", f.join(","))
                    }),
                ]
            })
        }

        /// `"key":value` for a few known keys and unknown ones, shuffled, maybe duplicated.
        fn fields(
            known: Vec<(&'static str, BoxedStrategy<String>)>,
        ) -> impl Strategy<Value = String> {
            let mut parts: Vec<BoxedStrategy<Option<String>>> = Vec::new();
            for (k, v) in known {
                parts.push(
                    prop::option::weighted(0.7, v)
                        .prop_map(move |v| v.map(|v| format!("\"{k}\":{v}")))
                        .boxed(),
                );
            }
            parts.push(
                prop::option::weighted(0.5, ("[a-z_]{1,8}", value()))
                    .prop_map(|o| o.map(|(k, v)| format!("\"{k}\":{v}")))
                    .boxed(),
            );
            (
                parts,
                any::<u64>(),
                prop::bool::weighted(0.05),
                prop::sample::select(vec!["", " ", "\n "]),
            )
                .prop_map(|(v, seed, dup, ws)| {
                    let mut f: Vec<String> = v.into_iter().flatten().collect();
                    if dup && !f.is_empty() {
                        f.push(f[0].clone());
                    }
                    // a seeded shuffle (the order of fields is free in JSON)
                    let mut x = seed | 1;
                    for i in (1..f.len()).rev() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        f.swap(i, (x % (i as u64 + 1)) as usize);
                    }
                    format!("{{{ws}{}{ws}}}", f.join(&format!(",{ws}")))
                })
        }

        fn opt_string() -> BoxedStrategy<String> {
            prop_oneof![4 => string(), 1 => Just("null".to_string()), 1 => Just("7".to_string())]
                .boxed()
        }

        fn delta_obj() -> BoxedStrategy<String> {
            prop_oneof![
                1 => Just("null".to_string()),
                8 => fields(vec![
                    ("content", opt_string()),
                    ("reasoning_content", opt_string()),
                    ("reasoning", opt_string()),
                    ("role", string().boxed()),
                    ("tool_calls", prop_oneof![
                        3 => Just("null".to_string()),
                        1 => Just(r#"[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}}]"#.to_string()),
                    ].boxed()),
                ]),
            ]
            .boxed()
        }

        fn choice() -> BoxedStrategy<String> {
            fields(vec![
                ("index", Just("0".to_string()).boxed()),
                ("delta", delta_obj()),
                ("message", delta_obj()),
                ("text", opt_string()),
                ("finish_reason", opt_string()),
                ("logprobs", Just("null".to_string()).boxed()),
            ])
            .boxed()
        }

        fn chunk() -> impl Strategy<Value = String> {
            fields(vec![
                ("id", string().boxed()),
                ("object", Just("\"chat.completion.chunk\"".to_string()).boxed()),
                ("choices", prop_oneof![
                    8 => prop::collection::vec(choice(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
                    1 => Just("null".to_string()),
                ].boxed()),
                ("usage", prop_oneof![
                    3 => Just("null".to_string()),
                    1 => Just(r#"{"prompt_tokens":3,"completion_tokens":1}"#.to_string()),
                ].boxed()),
                ("error", prop_oneof![
                    5 => Just("null".to_string()),
                    1 => Just(r#"{"message":"boom"}"#.to_string()),
                ].boxed()),
            ])
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]
            #[test]
            fn same_events(c in chunk()) {
                let data = c.as_bytes();
                let fast = decode_one(data, false);
                let serde = decode_one(data, true);
                prop_assert_eq!(&fast, &serde, "{}", c);
                if fast::scan(data).is_some() {
                    prop_assert!(serde.0.is_ok(), "{}", c);
                }
            }
        }

        /// The generator reaches both sides: chunks the scanner takes and chunks it leaves.
        #[test]
        fn generator_covers_both_paths() {
            use proptest::strategy::ValueTree;
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let (mut scanned, mut left) = (0, 0);
            for _ in 0..2000 {
                let c = chunk().new_tree(&mut runner).unwrap().current();
                if fast::scan(c.as_bytes()).is_some() {
                    scanned += 1;
                } else {
                    left += 1;
                }
            }
            assert!(scanned > 200 && left > 200, "scanned {scanned}, left to serde {left}");
        }
    }

    #[test]
    fn error_object_mid_stream_is_a_server_error() {
        let mut d = ChunkDecoder::new(false);
        let r =
            d.on_event(b"", br#"{"error":{"message":"out of KV cache","code":500}}"#, &mut |_| {});
        assert_eq!(r, Err(EngineError::ServerError("out of KV cache".into())));
        let r = d.on_event(b"", b"{not json", &mut |_| {});
        assert!(matches!(r, Err(EngineError::Protocol(_))));
    }
}
