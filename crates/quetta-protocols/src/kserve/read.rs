//! What a benchmark reads of a response, read in place: the error message, the final flag
//! and `text_output`'s raw contents, as slices of the message; the other fields are checked
//! as prost checks them and skipped.
//!
//! Decoding a whole `ModelStreamInferResponse` with prost allocates a dozen times per token
//! (model name, version, id, each output's name, datatype and shape, the parameters' map,
//! the raw contents), and that was most of the client's CPU per streamed request. This walks
//! the protobuf wire format once and allocates nothing. It is deliberately narrow: it takes
//! the shape servers send (strings, the parameters' map of bools, ints and strings, outputs
//! with a name, a datatype and a shape, raw contents) and answers `None` for anything else (a
//! field of an unexpected wire type, a response given twice, an output with `contents` or
//! parameters, more than [`MAX_RAW`] raw contents, bytes that are not protobuf), and the
//! caller decodes the message with prost as before. So where it answers, the answer is
//! prost's (a test compares the two on generated messages, and the `kserve` fuzz target on
//! every input).

/// Raw output contents read in place; a response with more is left to prost.
pub const MAX_RAW: usize = 8;

/// A field's value on the wire.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A 64-bit fixed-width value (wire type 1).
    Fixed64,
    /// A 32-bit fixed-width value (wire type 5).
    Fixed32,
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            // the tenth byte may only carry the 64th bit
            return (i < 9 || b <= 1).then_some(v);
        }
    }
    None
}

/// Every field of a message, in order: its number and value.
fn fields<'a>(mut buf: &'a [u8], mut each: impl FnMut(u64, Value<'a>) -> Option<()>) -> Option<()> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let (tag, wire) = (key >> 3, key & 7);
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return None;
        }
        let value = match wire {
            0 => Value::Varint(varint(&mut buf)?),
            1 => {
                buf = buf.get(8..)?;
                Value::Fixed64
            }
            5 => {
                buf = buf.get(4..)?;
                Value::Fixed32
            }
            2 => {
                let n = usize::try_from(varint(&mut buf)?).ok()?;
                let (v, rest) = buf.split_at_checked(n)?;
                buf = rest;
                Value::Bytes(v)
            }
            _ => return None,
        };
        each(tag, value)?;
    }
    Some(())
}

fn utf8(b: &[u8]) -> Option<()> {
    std::str::from_utf8(b).ok().map(|_| ())
}

/// One response as a benchmark reads it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    /// `ModelStreamInferResponse.error_message` (empty: none).
    pub error: &'a [u8],
    /// The message carried a response.
    pub has_response: bool,
    /// `triton_final_response` is true.
    pub last: bool,
    /// `text_output`: `None` without that output, else its raw contents (empty when it has
    /// none).
    pub text: Option<&'a [u8]>,
}

/// An `InferParameter`: whether it is `bool_param: true` (the oneof's last field read is
/// its value).
fn param_true(buf: &[u8]) -> Option<bool> {
    let mut is = false;
    fields(buf, |t, v| {
        match (t, v) {
            (1, Value::Varint(b)) => is = b != 0,
            // (double_param is a double: 64 bits on the wire, never 32)
            (2 | 5, Value::Varint(_)) | (4, Value::Fixed64) => is = false,
            (3, Value::Bytes(s)) => {
                utf8(s)?;
                is = false;
            }
            (1..=5, _) => return None,
            _ => {}
        }
        Some(())
    })?;
    Some(is)
}

/// A parameters' map entry: its key, and whether its value is `bool_param: true`.
fn entry(e: &[u8]) -> Option<(&[u8], bool)> {
    let (mut key, mut value): (&[u8], &[u8]) = (b"", b"");
    fields(e, |t, v| {
        match (t, v) {
            (1, Value::Bytes(k)) => {
                utf8(k)?;
                key = k;
            }
            // (prost merges a value given twice: left to it)
            (2, Value::Bytes(p)) if value.is_empty() => value = p,
            (2, Value::Bytes(_)) => return None,
            (1 | 2, _) => return None,
            _ => {}
        }
        Some(())
    })?;
    Some((key, param_true(value)?))
}

/// An output tensor with a name, a datatype and a shape only: its name.
fn output_name(out: &[u8]) -> Option<&[u8]> {
    let mut name: &[u8] = b"";
    fields(out, |t, v| {
        match (t, v) {
            // (every occurrence is checked, as prost reads each)
            (1, Value::Bytes(x)) => {
                utf8(x)?;
                name = x;
            }
            (2, Value::Bytes(x)) => utf8(x)?,
            (3, Value::Varint(_)) => {}
            (3, Value::Bytes(mut packed)) => {
                while !packed.is_empty() {
                    varint(&mut packed)?;
                }
            }
            (1..=5, _) => return None,
            _ => {}
        }
        Some(())
    })?;
    Some(name)
}

/// A `ModelInferResponse`'s fields a benchmark reads, into `r`.
fn response<'a>(buf: &'a [u8], r: &mut Reply<'a>) -> Option<()> {
    let mut raws: [&'a [u8]; MAX_RAW] = [b""; MAX_RAW];
    let (mut n_raw, mut n_out) = (0usize, 0usize);
    let mut text_at: Option<usize> = None;
    fields(buf, |tag, v| {
        match (tag, v) {
            (1..=3, Value::Bytes(s)) => utf8(s)?,
            (4, Value::Bytes(e)) => {
                let (key, is) = entry(e)?;
                if key == super::FINAL.as_bytes() {
                    r.last = is;
                }
            }
            (5, Value::Bytes(out)) => {
                if output_name(out)? == super::TEXT_OUTPUT.as_bytes() && text_at.is_none() {
                    text_at = Some(n_out);
                }
                n_out += 1;
            }
            (6, Value::Bytes(raw)) => {
                *raws.get_mut(n_raw)? = raw;
                n_raw += 1;
            }
            (1..=6, _) => return None,
            _ => {}
        }
        Some(())
    })?;
    r.text = text_at.map(|i| if i < n_raw { raws[i] } else { b"" });
    Some(())
}

/// A `ModelStreamInferResponse`, or `None`: left to prost.
pub fn stream_reply(buf: &[u8]) -> Option<Reply<'_>> {
    let mut r = Reply::default();
    let mut inner: Option<&[u8]> = None;
    fields(buf, |tag, v| {
        match (tag, v) {
            (1, Value::Bytes(e)) => {
                utf8(e)?;
                r.error = e;
            }
            // prost merges a response given twice: left to it
            (2, Value::Bytes(m)) if inner.is_none() => inner = Some(m),
            (1 | 2, _) => return None,
            _ => {}
        }
        Some(())
    })?;
    if let Some(m) = inner {
        r.has_response = true;
        response(m, &mut r)?;
    }
    Some(r)
}

/// A `ModelInferResponse` (the unary call's answer), or `None`: left to prost.
pub fn unary_reply(buf: &[u8]) -> Option<Reply<'_>> {
    let mut r = Reply { has_response: true, ..Reply::default() };
    response(buf, &mut r)?;
    Some(r)
}
