//! Audio transcription served strictly: a `multipart/form-data` upload (parsed by `multer`)
//! with a `file` that is a WAV or FLAC recording (decoded by its header: `hound`, `claxon`)
//! and a `model`; anything else is refused as OpenAI refuses it. The recording becomes the
//! internal shape: its prompt is 50 tokens per second of audio (Whisper's encoder frames,
//! as token ids of its own, so no two requests share a prefix), its text about three
//! words per second, capped by `max_completion_tokens`.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::dialect::{bad_request, Refusal};

/// Tokens of prompt per second of audio.
const TOKENS_PER_SECOND: f64 = 50.0;
/// Words of transcript per second of audio.
const WORDS_PER_SECOND: f64 = 3.0;

/// The seconds of a WAV or FLAC recording, from its header.
fn seconds(bytes: &[u8]) -> Result<f64, Refusal> {
    if let Ok(r) = hound::WavReader::new(std::io::Cursor::new(bytes)) {
        let rate = r.spec().sample_rate;
        if rate > 0 {
            return Ok(f64::from(r.duration()) / f64::from(rate));
        }
    }
    if let Ok(r) = claxon::FlacReader::new(std::io::Cursor::new(bytes)) {
        let i = r.streaminfo();
        if let (Some(n), true) = (i.samples, i.sample_rate > 0) {
            return Ok(n as f64 / f64::from(i.sample_rate));
        }
    }
    Err(bad_request(
        "Invalid file format. Supported formats: flac, wav (the simulator decodes these)".into(),
    ))
}

/// The fields of a transcription upload, checked, in the internal shape.
pub(crate) async fn normalize(
    content_type: Option<&str>,
    body: Bytes,
    seq: u64,
) -> Result<Value, Refusal> {
    let boundary = content_type.and_then(|c| multer::parse_boundary(c).ok()).ok_or_else(|| {
        bad_request("the body must be multipart/form-data with a boundary".into())
    })?;
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let (mut file, mut fields) = (None, serde_json::Map::new());
    while let Some(f) = form
        .next_field()
        .await
        .map_err(|e| bad_request(format!("malformed multipart body: {e}")))?
    {
        let name = f.name().unwrap_or("").to_owned();
        let bytes =
            f.bytes().await.map_err(|e| bad_request(format!("malformed multipart body: {e}")))?;
        if name == "file" {
            file = Some(bytes);
        } else {
            fields.insert(name, Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    let file = file.ok_or_else(|| bad_request("file: field required".into()))?;
    let model = fields
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| bad_request("model: field required".into()))?;
    let secs = seconds(&file)?;
    let flag = |k: &str| fields.get(k).and_then(Value::as_str).is_some_and(|v| v == "true");
    let cap = match fields.get("max_completion_tokens").and_then(Value::as_str) {
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            bad_request(format!("max_completion_tokens: {v:?} is not a whole number"))
        })?),
        None => None,
    };
    let words = ((secs * WORDS_PER_SECOND).ceil() as u64).max(1);
    let prompt: Vec<u64> =
        (0..(secs * TOKENS_PER_SECOND).round() as u64).map(|i| (seq << 20) + i).collect();
    Ok(json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": cap.map_or(words, |c| c.min(words)).max(1),
        "ignore_eos": true,
        "stream": flag("stream"),
        "stream_options": {"include_usage": flag("stream_include_usage")},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(secs: f64) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut c = std::io::Cursor::new(Vec::new());
        let mut w = hound::WavWriter::new(&mut c, spec).unwrap();
        for _ in 0..(secs * 16_000.0) as usize {
            w.write_sample(0i16).unwrap();
        }
        w.finalize().unwrap();
        c.into_inner()
    }

    fn form(parts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (k, v) in parts {
            let file = if *k == "file" { "; filename=\"a.wav\"" } else { "" };
            b.extend_from_slice(
                format!("--XB\r\nContent-Disposition: form-data; name=\"{k}\"{file}\r\n\r\n")
                    .as_bytes(),
            );
            b.extend_from_slice(v);
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"--XB--\r\n");
        b
    }

    fn run(body: Vec<u8>) -> Result<Value, Refusal> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(normalize(Some("multipart/form-data; boundary=XB"), Bytes::from(body), 1))
    }

    #[test]
    fn an_upload_is_checked_and_its_length_read() {
        let v = run(form(&[
            ("file", &wav(2.0)),
            ("model", b"w"),
            ("stream", b"true"),
            ("max_completion_tokens", b"4"),
        ]))
        .unwrap();
        assert_eq!(v["prompt"].as_array().unwrap().len(), 100, "50 tokens a second");
        assert_eq!((v["max_tokens"].as_u64(), v["stream"].as_bool()), (Some(4), Some(true)));
        let e = run(form(&[("file", b"not audio"), ("model", b"w")])).unwrap_err();
        assert!(e.message.contains("Invalid file format"), "{}", e.message);
        assert!(run(form(&[("model", b"w")])).unwrap_err().message.contains("file"));
        assert!(run(form(&[("file", &wav(1.0))])).unwrap_err().message.contains("model"));
    }
}
