//! The streamed body of one response: the protocol's events on the simulator's clock.

use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;
use serde_json::{json, Value};

use crate::dialect::{self, Dialect};
use crate::faults::Fault;
use crate::{Rng, Shared, SimRecord, WORDS};

/// The streamed body of one response.
pub(crate) struct SimStream {
    pub(crate) sh: Arc<Shared>,
    pub(crate) dialect: Dialect,
    pub(crate) include_usage: bool,
    pub(crate) id: String,
    pub(crate) model_json: String,
    pub(crate) created: u64,
    pub(crate) n_tokens: u32,
    pub(crate) sent_tokens: u32,
    pub(crate) next_at: Instant,
    pub(crate) rng: Rng,
    pub(crate) word_rng: Rng,
    pub(crate) sleep: crate::precise::Deadline,
    /// The protocol's opening events (sent with the headers) have gone out.
    pub(crate) opened: bool,
    /// From the start of the request's work to its first token (its server-side prompt
    /// time, as llama.cpp reports it).
    pub(crate) prompt_ms: f64,
    /// The last token's frame has been handed to hyper and the body yielded once, so it
    /// was written before the closing frame is made.
    pub(crate) last_flushed: bool,
    /// The twin engine's token instants for this request (live twin only).
    pub(crate) twin: Option<tokio::sync::mpsc::UnboundedReceiver<Instant>>,
    /// The next token's instant, received and not yet sent.
    pub(crate) twin_due: Option<Instant>,
    pub(crate) rec: Option<SimRecord>,
    pub(crate) stream: bool,
    /// The JSON of a chunk up to the generated text.
    pub(crate) prefix: String,
    pub(crate) fault: Option<Fault>,
    pub(crate) fault_fired: bool,
    pub(crate) stall_until: Option<Instant>,
    /// `linger`: the body ends only at this time, after `[DONE]`.
    pub(crate) linger_until: Option<Instant>,
    pub(crate) drip: Bytes,
    pub(crate) drip_at: Instant,
    /// The prompt's prefix-cache tokens; the reply's are appended when it is done.
    pub(crate) cache_tokens: Vec<u64>,
    pub(crate) cache_on: bool,
    /// A stored Response's conversation (`store: true`), kept with its reply at the end.
    pub(crate) history: Option<Vec<Value>>,
    /// The batch slot this request holds until its response ends (or is dropped).
    pub(crate) _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// gRPC: the client asked for an empty final response, and how far the call's end
    /// has gone (0: not yet; 1: the final response went out; 2: the trailers too).
    pub(crate) grpc_empty_final: bool,
    pub(crate) grpc_end: u8,
}

impl SimStream {
    /// The next frame as it goes on the wire: the protocol's events, or for gRPC those
    /// events as protobuf responses, then the empty final response (where asked for) and
    /// the status in the trailers.
    fn next_wire(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.dialect != Dialect::Grpc {
            return self.next_frame(cx).map(|f| f.map(|r| r.map(Frame::data)));
        }
        let model = self.sh.cfg.model.clone();
        match self.grpc_end {
            0 => {}
            1 => {
                self.grpc_end = 2;
                return Poll::Ready(Some(Ok(Frame::trailers(crate::grpc::status_headers(0, "")))));
            }
            _ => return Poll::Ready(None),
        }
        match self.next_frame(cx) {
            Poll::Ready(Some(Ok(events))) => {
                let last = self.sent_tokens == self.n_tokens && !self.grpc_empty_final;
                let wire = crate::grpc::frames(&events, &model, &self.id, last);
                Poll::Ready(Some(Ok(Frame::data(wire))))
            }
            Poll::Ready(None) => {
                self.grpc_end = 1;
                if self.grpc_empty_final {
                    let m = quetta_protocols::kserve::pb::ModelStreamInferResponse {
                        error_message: String::new(),
                        infer_response: Some(crate::grpc::response(&model, &self.id, None, true)),
                    };
                    let frame = quetta_protocols::kserve::frame(&m);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(frame)))));
                }
                self.next_wire(cx)
            }
            other => other.map(|f| f.map(|r| r.map(Frame::data))),
        }
    }

    pub(crate) fn prompt_tokens(&self) -> u64 {
        self.rec.as_ref().map_or(0, |r| r.prompt_tokens)
    }

    /// The usage object's JSON.
    pub(crate) fn usage_json(&self) -> String {
        let p = self.prompt_tokens();
        let n = u64::from(self.n_tokens);
        let mut s =
            format!("{{\"prompt_tokens\":{p},\"completion_tokens\":{n},\"total_tokens\":{}", p + n);
        if self.cache_on {
            let c = self.rec.as_ref().map_or(0, |r| r.cached_tokens);
            let _ = write!(s, ",\"prompt_tokens_details\":{{\"cached_tokens\":{c}}}");
        }
        s.push('}');
        s
    }

    /// What the protocol's frames are made from, `total` tokens long.
    pub(crate) fn sim_frame<'a>(&'a self, total: u32, text_so_far: &'a str) -> dialect::Frame<'a> {
        dialect::Frame {
            id: &self.id,
            created: self.created,
            model_json: &self.model_json,
            prompt_tokens: self.prompt_tokens(),
            cached_tokens: self.rec.as_ref().map_or(0, |r| r.cached_tokens),
            sent: self.sent_tokens,
            total,
            text_so_far,
            prompt_ms: self.prompt_ms,
            per_token_ms: self.sh.cfg.itl.as_secs_f64() * 1e3,
            include_usage: self.include_usage,
        }
    }

    /// A stored Response: its conversation and reply, under its id.
    pub(crate) fn store_response(&mut self, reply: &str) {
        if let Some(mut h) = self.history.take() {
            h.push(json!({"role": "assistant", "content": reply}));
            let mut map =
                self.sh.responses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            map.insert(self.id.clone(), h);
        }
    }

    /// A finished reply: store the blocks of the prompt followed by the reply (tagged as
    /// the assistant's, as the next turn will send it).
    pub(crate) fn cache_reply(&mut self, text: &str) {
        if !self.cache_on {
            return;
        }
        let mut t = std::mem::take(&mut self.cache_tokens);
        t.extend(text.split_whitespace().map(|w| crate::cache::word_token("assistant", w)));
        let mut c = self.sh.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let blocks = c.blocks(&t);
        c.insert(&blocks);
    }

    pub(crate) fn gap(&mut self) -> Duration {
        let cfg = &self.sh.cfg;
        let gap = if cfg.itl_jitter.is_zero() {
            cfg.itl
        } else {
            let j = cfg.itl_jitter.as_secs_f64() * (2.0 * self.rng.f64() - 1.0);
            Duration::from_secs_f64((cfg.itl.as_secs_f64() + j).max(0.0))
        };
        if cfg.warm_up.is_none() {
            return gap;
        }
        gap.mul_f64(self.sh.slowdown(Instant::now()))
    }

    /// Append `k` generated words, space-separated (no leading space).
    pub(crate) fn push_words(&mut self, out: &mut String, k: u32) {
        for i in 0..k {
            let w = WORDS[(self.word_rng.next_u64() % WORDS.len() as u64) as usize];
            if i > 0 {
                out.push(' ');
            }
            out.push_str(w);
        }
    }

    /// One SSE event carrying `text` (generated words: ASCII, nothing to escape).
    fn chunk_event(&self, out: &mut String, text: &str, finish: Option<&str>) {
        let chat = self.dialect == Dialect::Chat;
        if !matches!(self.dialect, Dialect::Chat | Dialect::Completions) {
            let f =
                self.sim_frame(self.n_tokens, self.rec.as_ref().map_or("", |r| r.text.as_str()));
            self.dialect.tokens(out, &f, text, finish.is_some());
            return;
        }
        out.push_str(&self.prefix);
        out.push_str(text);
        match finish {
            None => out.push_str(if chat {
                "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
            } else {
                "\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
            }),
            Some(f) => {
                out.push_str(if chat {
                    "\"},\"logprobs\":null,\"finish_reason\":\""
                } else {
                    "\",\"logprobs\":null,\"finish_reason\":\""
                });
                out.push_str(f);
                out.push_str("\"}]}\n\n");
            }
        }
    }
}

impl http_body::Body for SimStream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if let Some(at) = this.linger_until {
            if !this.wait_until(at, cx) {
                return Poll::Pending;
            }
            this.linger_until = None;
            return Poll::Ready(None);
        }
        // Slow drip: every frame leaves one byte at a time, 1 ms apart.
        if !this.drip.is_empty() {
            if !this.wait_until(Instant::now().max(this.drip_at), cx) {
                return Poll::Pending;
            }
            let b = this.drip.split_to(1);
            this.drip_at = Instant::now() + Duration::from_millis(1);
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match this.next_wire(cx) {
            Poll::Ready(Some(Ok(frame))) if this.fault == Some(Fault::SlowDrip) => {
                match frame.into_data() {
                    Ok(mut bytes) if bytes.len() > 1 => {
                        this.drip = bytes.split_off(1);
                        this.drip_at = Instant::now() + Duration::from_millis(1);
                        Poll::Ready(Some(Ok(Frame::data(bytes))))
                    }
                    Ok(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                    Err(frame) => Poll::Ready(Some(Ok(frame))),
                }
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rec.is_none()
            && self.drip.is_empty()
            && self.linger_until.is_none()
            && (self.dialect != Dialect::Grpc || self.grpc_end == 2)
    }
}

impl SimStream {
    /// Wait until `at` (a timerfd: to the microsecond, not tokio's millisecond); true once
    /// it has passed.
    fn wait_until(&mut self, at: Instant, cx: &mut Context<'_>) -> bool {
        self.sleep.poll_until(at, cx).is_ready()
    }

    /// End the record with a fault and fail the body (hyper then drops the connection).
    pub(crate) fn abort(&mut self, what: &str) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        self.end_with_error(what);
        Poll::Ready(Some(Err(std::io::Error::other(format!("simulated fault: {what}")))))
    }

    fn end_with_error(&mut self, what: &str) {
        if let Some(mut rec) = self.rec.take() {
            rec.completion_tokens = u64::from(self.sent_tokens);
            rec.end = Instant::now();
            rec.error = Some(format!("fault: {what}"));
            self.sh.finish(rec);
        }
    }

    /// A fault that fires halfway through the stream, once.
    fn midstream_fault(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Option<Result<Bytes, std::io::Error>>>> {
        let mid = (self.n_tokens / 2).max(1);
        if self.sent_tokens != mid || self.fault_fired {
            return None;
        }
        let fault = self.fault?;
        let bad = |this: &mut Self, bytes: Vec<u8>, what: &str| {
            this.fault_fired = true;
            this.end_with_error(what);
            Some(Poll::Ready(Some(Ok(Bytes::from(bytes)))))
        };
        match fault {
            Fault::ResetMidStream => {
                // When the next chunk is due, so the chunks before it have left the buffer.
                if self.wait_until(self.next_at, cx) {
                    Some(self.abort("reset mid-stream"))
                } else {
                    Some(Poll::Pending)
                }
            }
            Fault::Stall(t) => {
                if self.stall_until.is_none() {
                    self.stall_until = Some(Instant::now() + t);
                }
                if self.wait_until(self.stall_until.unwrap_or_else(Instant::now), cx) {
                    self.fault_fired = true;
                    self.next_at = Instant::now();
                    None
                } else {
                    Some(Poll::Pending)
                }
            }
            Fault::BadJson => bad(
                self,
                b"data: {\"choices\": [{\"delta\": {\"content\": \"x\"\n\n".to_vec(),
                "bad JSON",
            ),
            Fault::InvalidUtf8 => {
                let mut v = self.prefix.clone().into_bytes();
                v.extend_from_slice(b"\xff\xfe\xfd");
                v.extend_from_slice(b"\"},\"finish_reason\":null}]}\n\n");
                bad(self, v, "invalid UTF-8")
            }
            Fault::HugeEvent => {
                let mut v = self.prefix.clone().into_bytes();
                v.extend(std::iter::repeat_n(b'x', 1_536 * 1024));
                v.extend_from_slice(b"\"},\"finish_reason\":null}]}\n\n");
                bad(self, v, "event over 1 MiB")
            }
            Fault::ErrorEvent => bad(self, self.dialect.error_event().to_vec(), "error event"),
            _ => None,
        }
    }

    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        let this = self;
        if this.rec.is_none() {
            return Poll::Ready(None);
        }
        if this.fault == Some(Fault::ResetAfterHeaders) {
            return this.abort("reset after headers");
        }
        if !this.opened {
            // Events some protocols send before any token (Responses' `response.created`,
            // Messages' `message_start`), at once.
            this.opened = true;
            let open = this.dialect.open(&this.sim_frame(this.n_tokens, ""));
            if !open.is_empty() {
                return Poll::Ready(Some(Ok(Bytes::from(open))));
            }
        }
        if let Some(p) = this.midstream_fault(cx) {
            return p;
        }
        if this.sent_tokens < this.n_tokens {
            if let Some(rx) = this.twin.as_mut() {
                if this.twin_due.is_none() {
                    match rx.poll_recv(cx) {
                        Poll::Ready(Some(at)) => this.twin_due = Some(at),
                        Poll::Ready(None) => return this.abort("the twin's engine stopped"),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                let due = this.twin_due.unwrap_or_else(Instant::now);
                if !this.wait_until(due, cx) {
                    return Poll::Pending;
                }
                this.twin_due = None;
            } else if !this.wait_until(this.next_at, cx) {
                return Poll::Pending;
            }
            let per_chunk =
                if this.twin.is_some() { 1 } else { this.sh.cfg.tokens_per_chunk.max(1) };
            let k = per_chunk.min(this.n_tokens - this.sent_tokens);
            let mut text = String::with_capacity(16 * k as usize);
            if this.sent_tokens > 0 {
                text.push(' ');
            }
            this.push_words(&mut text, k);
            let last = this.sent_tokens + k == this.n_tokens;
            let mut frame = String::with_capacity(this.prefix.len() + text.len() + 64);
            if this.dialect == Dialect::Chat && this.sent_tokens == 0 {
                // vLLM and llama.cpp open with a role-only chunk, sent with the first token.
                let _ = write!(
                    frame,
                    "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    this.id, this.created, this.model_json
                );
            }
            let finish = (last && this.fault != Some(Fault::NoDone)).then_some("length");
            this.chunk_event(&mut frame, &text, finish);
            this.sent_tokens += k;
            let gap = this.gap();
            let stamp = Instant::now();
            // Absolute schedule, so the mean ITL is the configured one: a late chunk is made up
            // for over the next ones, but no two chunks of a stream leave closer than half a
            // gap (a burst of catch-up chunks would leave a client half a gap or less to read
            // each before the next arrives and the kernel merges them). More than one gap
            // behind, the schedule restarts from this send.
            this.next_at = if stamp > this.next_at + gap {
                stamp + gap
            } else {
                (this.next_at + gap).max(stamp + gap / 2)
            };
            if let Some(r) = this.rec.as_mut() {
                r.text.push_str(&text);
                r.chunks.push(stamp);
                r.chunk_tokens.push(k);
            }
            return Poll::Ready(Some(Ok(Bytes::from(frame))));
        }
        if this.fault == Some(Fault::NoDone) {
            // The stream just stops: no finish_reason, no usage, no [DONE].
            this.end_with_error("no [DONE]");
            return Poll::Ready(None);
        }
        if !this.last_flushed {
            // hyper polls the body again before it writes: without this the last token would
            // leave only after the record and the prefix cache are done (50-100 µs later).
            this.last_flushed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut frame = String::new();
        let text = this.rec.as_ref().map(|r| r.text.clone()).unwrap_or_default();
        if !matches!(this.dialect, Dialect::Chat | Dialect::Completions) {
            this.dialect.close(&mut frame, &this.sim_frame(this.n_tokens, ""), &text);
        } else if this.include_usage && this.fault != Some(Fault::NoUsage) {
            let _ = write!(
                frame,
                "data: {{\"id\":\"{}\",\"object\":\"{}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{}}}\n\n",
                this.id,
                if this.dialect == Dialect::Chat { "chat.completion.chunk" } else { "text_completion" },
                this.created,
                this.model_json,
                this.usage_json()
            );
        }
        if matches!(this.dialect, Dialect::Chat | Dialect::Completions) {
            frame.push_str("data: [DONE]\n\n");
        }
        if this.cache_on {
            this.cache_reply(&text);
        }
        this.store_response(&text);
        if let Some(mut rec) = this.rec.take() {
            rec.completion_tokens = u64::from(this.n_tokens);
            rec.end = Instant::now();
            this.sh.finish(rec);
        }
        if let Some(Fault::Linger(t)) = this.fault {
            this.linger_until = Some(Instant::now() + t);
        }
        if frame.is_empty() {
            // a protocol without closing events (TGI, Triton): the body just ends
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Bytes::from(frame))))
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        if let Some(mut rec) = self.rec.take() {
            rec.completion_tokens = u64::from(self.sent_tokens);
            rec.end = Instant::now();
            rec.error =
                Some(if self.stream { "client disconnected".into() } else { "dropped".into() });
            self.sh.finish(rec);
        }
    }
}
