//! A scanner for the common shape of a streamed chunk, beside serde.
//!
//! Nearly every event of a stream is a content (or reasoning) delta of one choice:
//! `{"id":…,"object":"chat.completion.chunk",…,"choices":[{"index":0,"delta":{"content":"…"},
//! "finish_reason":null}]}`. Deserializing it through serde's generic machinery was about a
//! fifth of the client's CPU per streamed token. [`scan`] walks such a chunk once, without
//! allocating, and returns what [`crate::decode::ChunkDecoder`] needs from it.
//!
//! It is deliberately narrow. It answers `None` — and the caller decodes the chunk with serde
//! as before — for anything it does not take in fully: a backslash escape in any string, a
//! `usage`, `error` or `tool_calls` that is not `null`, a field of an unexpected type, a
//! duplicate known field, more than [`MAX_CHOICES`] choices, nesting deeper than
//! [`MAX_DEPTH`], invalid JSON or UTF-8. So where it answers, the answer is serde's (a test
//! compares the two on generated chunks).

/// Choices one chunk may carry for the scanner (more: serde).
pub(crate) const MAX_CHOICES: usize = 2;
/// Nesting of ignored values the scanner follows (deeper: serde).
const MAX_DEPTH: usize = 32;

/// The fields of a delta (or message) the decoder reads; `None`: absent or `null`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaFields<'a> {
    pub content: Option<&'a str>,
    pub reasoning_content: Option<&'a str>,
    pub reasoning: Option<&'a str>,
}

/// One choice, as the decoder reads it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChoiceFields<'a> {
    /// `delta`, else `message` (as the decoder prefers them).
    pub delta: Option<DeltaFields<'a>>,
    pub text: Option<&'a str>,
    pub finish_reason: Option<&'a str>,
}

/// A chunk the scanner took in fully: `choices` (`None`: absent or `null`); its `usage`,
/// `error` and every `tool_calls` were absent or `null`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned<'a> {
    pub choices: Option<([ChoiceFields<'a>; MAX_CHOICES], usize)>,
}

impl<'a> Scanned<'a> {
    pub fn choices(&self) -> &[ChoiceFields<'a>] {
        self.choices.as_ref().map_or(&[], |(c, n)| &c[..*n])
    }
}

/// Scan one chunk; `None`: decode it with serde.
pub(crate) fn scan(data: &[u8]) -> Option<Scanned<'_>> {
    // One pass each for the whole chunk, so strings need neither: valid UTF-8 (strings are
    // cut at ASCII quotes, so each is valid too) and no control character (never valid raw
    // in a JSON string; an SSE data line has no line break; a tab between tokens: serde).
    if data.iter().any(|&b| b < 0x20) {
        return None;
    }
    let text = std::str::from_utf8(data).ok()?;
    let mut p = Parser { t: text, s: data, i: 0 };
    let mut out = Scanned::default();
    p.fields([b"choices", b"usage", b"error", b"timings"], |p, i| {
        if i > 0 {
            // usage, error and timings: only null is the scanner's
            return p.null().then_some(());
        }
        if p.null() {
            return Some(());
        }
        let mut list = [ChoiceFields::default(); MAX_CHOICES];
        let mut n = 0;
        p.array(|p| {
            if n == MAX_CHOICES {
                return None;
            }
            list[n] = p.choice()?;
            n += 1;
            Some(())
        })?;
        out.choices = Some((list, n));
        Some(())
    })?;
    p.ws();
    (p.i == p.s.len()).then_some(out)
}

/// A known field seen twice is serde's to reject.
fn once(seen: &mut bool) -> Option<()> {
    if *seen {
        return None;
    }
    *seen = true;
    Some(())
}

/// The index of the first `"` or `\\` in `s`. A plain loop: strings here are short (a token,
/// an id); memchr's vector setup cost more than it saved, and an eight-bytes-at-a-time scan
/// showed no gain beyond this VM's noise in the decode bench.
fn quote_or_backslash(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'"' || b == b'\\')
}

struct Parser<'a> {
    t: &'a str,
    /// `t`'s bytes.
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// `null` (consumed) or not (nothing consumed but whitespace).
    fn null(&mut self) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(b"null") {
            self.i += 4;
            true
        } else {
            false
        }
    }

    /// A string without escapes.
    fn string(&mut self) -> Option<&'a str> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        let end = start + quote_or_backslash(&self.s[start..])?;
        if self.s[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        self.t.get(start..end)
    }

    /// A string, or `null` as `None` (the outer `None`, as everywhere here: not the
    /// scanner's to take).
    #[allow(clippy::option_option)]
    fn opt_string(&mut self) -> Option<Option<&'a str>> {
        if self.null() {
            Some(None)
        } else {
            self.string().map(Some)
        }
    }

    /// `{ "key": value, … }`, `f` reading each value.
    fn object(&mut self, mut f: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?.as_bytes();
            if !self.eat(b':') {
                return None;
            }
            f(self, key)?;
            if self.eat(b'}') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// `[ value, … ]`, `f` reading each value.
    fn array(&mut self, mut f: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(());
        }
        loop {
            f(self)?;
            if self.eat(b']') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// An object whose known `keys` are each read by `f(p, index of the key)`; other keys'
    /// values are skipped. A known key seen twice is serde's to reject.
    fn fields<const N: usize>(
        &mut self,
        keys: [&[u8]; N],
        mut f: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        let mut seen = [false; N];
        self.object(|p, key| match keys.iter().position(|k| *k == key) {
            Some(i) => {
                once(&mut seen[i])?;
                f(p, i)
            }
            None => p.skip(0),
        })
    }

    fn choice(&mut self) -> Option<ChoiceFields<'a>> {
        let mut c = ChoiceFields::default();
        let mut message = None;
        self.fields([b"delta", b"message", b"text", b"finish_reason"], |p, i| {
            match i {
                0 => c.delta = p.delta()?,
                1 => message = p.delta()?,
                2 => c.text = p.opt_string()?,
                _ => c.finish_reason = p.opt_string()?,
            }
            Some(())
        })?;
        c.delta = c.delta.or(message);
        Some(c)
    }

    /// A delta or message object, or `null` as `None`.
    #[allow(clippy::option_option)]
    fn delta(&mut self) -> Option<Option<DeltaFields<'a>>> {
        if self.null() {
            return Some(None);
        }
        let mut d = DeltaFields::default();
        self.fields([b"content", b"reasoning_content", b"reasoning", b"tool_calls"], |p, i| {
            match i {
                0 => d.content = p.opt_string()?,
                1 => d.reasoning_content = p.opt_string()?,
                2 => d.reasoning = p.opt_string()?,
                _ => p.null().then_some(())?,
            }
            Some(())
        })?;
        Some(Some(d))
    }

    /// Any JSON value (strict grammar; an escape anywhere: `None`).
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match *self.s.get(self.i)? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|p, _| p.skip(depth + 1)),
            b'[' => self.array(|p| p.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let s = self.s;
        let digits = |i: &mut usize| {
            let start = *i;
            while s.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > start
        };
        let mut i = self.i;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            _ => return None,
        }
        if s.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = s.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = s.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.i = i;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_llama_cpp_and_completions_chunks_are_scanned() {
        let vllm = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1732000000,"model":"m","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#;
        let s = scan(vllm).unwrap();
        assert_eq!(s.choices().len(), 1);
        assert_eq!(s.choices()[0].delta.unwrap().content, Some(" world"));
        let llama = br#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"x","model":"m","system_fingerprint":"b1-abc","object":"chat.completion.chunk","timings":{"prompt_n":4,"predicted_per_second":1.5e2}}"#;
        assert_eq!(scan(llama), None, "llama.cpp's timings are serde's (the server's own timing)");
        let llama_token = br#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"x","model":"m","system_fingerprint":"b1-abc","object":"chat.completion.chunk","timings":null}"#;
        let s = scan(llama_token).unwrap();
        assert_eq!(s.choices()[0].finish_reason, Some("stop"));
        assert_eq!(s.choices()[0].delta, Some(DeltaFields::default()));
        let msg = br#"{"choices":[{"delta":null,"message":{"content":"m"}}]}"#;
        assert_eq!(scan(msg).unwrap().choices()[0].delta.unwrap().content, Some("m"));
        let cmpl = br#"{"choices":[{"text":"h\u00e9","index":0}]}"#;
        assert_eq!(scan(cmpl), None, "escapes are serde's");
        let cmpl = "{\"choices\":[{\"text\":\"hé\",\"index\":0,\"logprobs\":null}]}";
        assert_eq!(scan(cmpl.as_bytes()).unwrap().choices()[0].text, Some("hé"));
    }

    /// Every token chunk of the real captures takes the scanner (the figures in
    /// docs/PERFORMANCE.md rest on it); what is left to serde is a usage or timings chunk or
    /// `[DONE]`.
    #[test]
    fn real_llama_cpp_and_vllm_token_chunks_are_scanned() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/sse");
        for f in [
            "llama.cpp/ls_chat_stream.txt",
            "formats/vllm_chat.sse",
            "formats/vllm_completions.sse",
        ] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            let (mut scanned, mut left) = (0, 0);
            for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
                if scan(data.as_bytes()).is_some() {
                    scanned += 1;
                } else {
                    let last = data.contains("\"usage\":{") || data.contains("\"timings\":{");
                    assert!(data == "[DONE]" || last, "{f}: {data}");
                    left += 1;
                }
            }
            assert!(scanned >= 5 && left <= 2, "{f}: scanned {scanned}, left {left}");
        }
    }

    #[test]
    fn quote_or_backslash_finds_the_first_at_every_offset() {
        for len in 0..40 {
            for at in 0..=len {
                for c in [b'"', b'\\'] {
                    let mut v = vec![b'a'; len];
                    // bytes that differ from the targets by one bit, and high bytes
                    for (i, b) in v.iter_mut().enumerate() {
                        *b = [b'a', b'#', b'!', 0xe9, b']', b'\x22' ^ 0x80][i % 6];
                    }
                    if at < len {
                        v[at] = c;
                    }
                    let want = v.iter().position(|&b| b == b'"' || b == b'\\');
                    assert_eq!(quote_or_backslash(&v), want, "len {len} at {at}");
                }
            }
        }
    }

    #[test]
    fn what_it_does_not_take_in_fully_goes_to_serde() {
        for d in [
            &br#"{"choices":[],"usage":{"prompt_tokens":1}}"#[..],
            br#"{"error":{"message":"x"}}"#,
            br#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f"}}]}}]}"#,
            br#"{"choices":[{"delta":{"content":5}}]}"#,
            br#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            br#"{"choices":[{},{},{}]}"#,
            br#"{"choices":[]} x"#,
            br#"{"choices":[],"n":01}"#,
            br#"{"choices":[],"n":1.}"#,
            b"{\"choices\":[{\"text\":\"\xff\"}]}",
            br#"{"choices":[{"text":"a"}],}"#,
            b"[1]",
        ] {
            assert_eq!(scan(d), None, "{}", String::from_utf8_lossy(d));
        }
    }
}
