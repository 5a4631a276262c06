//! An incremental Server-Sent Events parser.
//!
//! It is fed body frames as they arrive and calls back once per complete event with the
//! event's type and its data (data lines joined by `\n`). It handles events split across
//! frames, many events in one frame, `\n`, `\r\n` and `\r` line ends (including a `\r\n`
//! split between two frames), comments, `event:` fields and a missing final blank line.
//! Memory is bounded: a single event larger than the configured limit is an error, not an
//! allocation. Buffers are reused, so steady-state parsing does not allocate.

/// Default upper bound on one event (line plus accumulated data), in bytes.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

/// The parser could not accept the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// One event exceeded the size limit.
    #[error("SSE event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
}

/// Incremental SSE parser; see the module documentation.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    event: Vec<u8>,
    has_data: bool,
    skip_lf: bool,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser that rejects events over `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            event: Vec::new(),
            has_data: false,
            skip_lf: false,
            max_event_bytes,
        }
    }

    /// Feed one frame. `on_event(event_type, data)` is called for every event the frame
    /// completes, in order; `event_type` is empty when the event had no `event:` field.
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        mut on_event: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), SseError> {
        while !chunk.is_empty() {
            if self.skip_lf {
                self.skip_lf = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', chunk) {
                None => {
                    if self.line.len() + chunk.len() + self.data.len() > self.max_event_bytes {
                        return Err(SseError::EventTooLarge { limit: self.max_event_bytes });
                    }
                    self.line.extend_from_slice(chunk);
                    return Ok(());
                }
                Some(i) => {
                    if self.line.is_empty() {
                        self.process_line(&chunk[..i], &mut on_event)?;
                    } else {
                        if self.line.len() + i + self.data.len() > self.max_event_bytes {
                            return Err(SseError::EventTooLarge { limit: self.max_event_bytes });
                        }
                        let mut line = std::mem::take(&mut self.line);
                        line.extend_from_slice(&chunk[..i]);
                        let r = self.process_line(&line, &mut on_event);
                        line.clear();
                        self.line = line;
                        r?;
                    }
                    if chunk[i] == b'\r' {
                        if i + 1 < chunk.len() {
                            if chunk[i + 1] == b'\n' {
                                chunk = &chunk[i + 2..];
                                continue;
                            }
                        } else {
                            self.skip_lf = true;
                        }
                    }
                    chunk = &chunk[i + 1..];
                }
            }
        }
        Ok(())
    }

    /// The body ended: a final line without its line end is processed and a pending event
    /// without its closing blank line is dispatched (lenient, as browsers are not, because
    /// some servers omit the last blank line).
    pub fn finish(&mut self, mut on_event: impl FnMut(&[u8], &[u8])) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut on_event)?;
        }
        self.process_line(b"", &mut on_event)
    }

    fn process_line(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                on_event(&self.event, &self.data);
            }
            self.data.clear();
            self.event.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    return Err(SseError::EventTooLarge { limit: self.max_event_bytes });
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            _ => {} // id, retry and unknown fields do not matter to a benchmark
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(frames: &[&[u8]]) -> Vec<(String, String)> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for f in frames {
            p.feed(f, |e, d| {
                out.push((String::from_utf8_lossy(e).into(), String::from_utf8_lossy(d).into()));
            })
            .unwrap();
        }
        p.finish(|e, d| {
            out.push((String::from_utf8_lossy(e).into(), String::from_utf8_lossy(d).into()));
        })
        .unwrap();
        out
    }

    #[test]
    fn line_endings_comments_and_fields() {
        let got = parse_all(&[b": keep-alive\r\ndata: a\r\n\r\nevent: error\ndata: b\ndata: c\n\ndata:d\r\rdata: [DONE]"]);
        assert_eq!(
            got,
            vec![
                (String::new(), "a".into()),
                ("error".into(), "b\nc".into()),
                (String::new(), "d".into()),
                (String::new(), "[DONE]".into()),
            ]
        );
    }

    #[test]
    fn crlf_split_between_frames_is_one_line_end() {
        let got = parse_all(&[b"data: x\r", b"\n\r", b"\ndata: y\n\n"]);
        assert_eq!(got, vec![(String::new(), "x".into()), (String::new(), "y".into())]);
    }

    #[test]
    fn oversized_event_is_an_error_not_an_allocation() {
        let mut p = SseParser::new(64);
        let big = vec![b'x'; 100];
        let mut n = 0;
        assert!(p.feed(b"data: ", |_, _| n += 1).is_ok());
        assert_eq!(p.feed(&big, |_, _| n += 1), Err(SseError::EventTooLarge { limit: 64 }));
        let mut p = SseParser::new(64);
        let mut frame = b"data: ".to_vec();
        frame.extend_from_slice(&big);
        frame.extend_from_slice(b"\n\n");
        assert!(p.feed(&frame, |_, _| n += 1).is_err());
        assert_eq!(n, 0);
    }
}
