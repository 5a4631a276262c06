//! Recordings to transcribe: the WAV and FLAC files of a directory, or the files a JSONL
//! dataset names (`{"audio": "path", "prompt": "..."}` a line, paths relative to the
//! dataset). Each file is read once: its bytes are shared by every request that sends it,
//! and its length comes from its header (`hound` for WAV, `claxon` for FLAC). Request `i`
//! sends recording `i mod n` in a seeded order, asking for at most the output length.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quetta_engine::{AudioInput, Prompt};

use crate::{parse_err, read_bytes, PlannedRequest, Workload, WorkloadError};

/// One recording, read.
#[derive(Debug, Clone)]
pub struct Clip {
    pub input: AudioInput,
}

/// The length in seconds and the media type of a WAV or FLAC file's bytes.
pub fn probe(path: &Path, bytes: &[u8]) -> Result<(f64, &'static str), WorkloadError> {
    let bad = |reason: String| WorkloadError::Io { path: path.display().to_string(), reason };
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "wav" => {
            let r = hound::WavReader::new(std::io::Cursor::new(bytes))
                .map_err(|e| bad(format!("not a WAV file this reader takes: {e}")))?;
            let spec = r.spec();
            if spec.sample_rate == 0 || spec.channels == 0 {
                return Err(bad("a WAV file without samples per second".into()));
            }
            Ok((f64::from(r.duration()) / f64::from(spec.sample_rate), "audio/wav"))
        }
        "flac" => {
            let r = claxon::FlacReader::new(std::io::Cursor::new(bytes))
                .map_err(|e| bad(format!("not a FLAC file this reader takes: {e}")))?;
            let info = r.streaminfo();
            let samples = info
                .samples
                .ok_or_else(|| bad("a FLAC file that does not say its length".into()))?;
            if info.sample_rate == 0 {
                return Err(bad("a FLAC file without samples per second".into()));
            }
            Ok((samples as f64 / f64::from(info.sample_rate), "audio/flac"))
        }
        other => Err(bad(format!("audio files are WAV or FLAC, not {other:?}"))),
    }
}

fn clip(path: &Path, prompt: Option<String>) -> Result<Clip, WorkloadError> {
    let bytes = read_bytes(path)?;
    let (seconds, mime) = probe(path, &bytes)?;
    let file_name =
        path.file_name().map_or_else(|| "audio".into(), |n| n.to_string_lossy().into_owned());
    Ok(Clip {
        input: AudioInput { data: Arc::from(bytes), file_name, mime: mime.into(), seconds, prompt },
    })
}

/// The recordings of a directory (its `.wav` and `.flac` files, by name) or of a JSONL
/// dataset; errors name the file (and the line).
pub fn load(path: &Path) -> Result<Vec<Clip>, WorkloadError> {
    let clips = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| WorkloadError::Io {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                    e.eq_ignore_ascii_case("wav") || e.eq_ignore_ascii_case("flac")
                })
            })
            .collect();
        files.sort();
        files.iter().map(|f| clip(f, None)).collect::<Result<Vec<_>, _>>()?
    } else {
        let text = crate::read(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut v = Vec::new();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let row: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| parse_err(path, i + 1, "-", e.to_string()))?;
            let file = row.get("audio").and_then(serde_json::Value::as_str).ok_or_else(|| {
                parse_err(path, i + 1, "audio", "the recording's path is required")
            })?;
            let prompt = row.get("prompt").and_then(serde_json::Value::as_str).map(str::to_owned);
            v.push(
                clip(&base.join(file), prompt)
                    .map_err(|e| parse_err(path, i + 1, "audio", e.to_string()))?,
            );
        }
        v
    };
    if clips.is_empty() {
        return Err(WorkloadError::Io {
            path: path.display().to_string(),
            reason: "no WAV or FLAC recording in it".into(),
        });
    }
    Ok(clips)
}

/// Requests of recordings, in a seeded order, as many as asked for.
#[derive(Debug)]
pub struct AudioWorkload {
    clips: Vec<Clip>,
    order: Vec<usize>,
    max_tokens: u32,
}

impl AudioWorkload {
    pub fn new(clips: Vec<Clip>, max_tokens: u32, seed: u64) -> Self {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let mut order: Vec<usize> = (0..clips.len()).collect();
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        Self { clips, order, max_tokens }
    }

    /// Seconds of all the recordings.
    pub fn seconds(&self) -> f64 {
        self.clips.iter().map(|c| c.input.seconds).sum()
    }
}

impl Workload for AudioWorkload {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let i = self.order[(index % self.order.len() as u64) as usize];
        Some(PlannedRequest {
            index,
            prompt: Prompt::Audio(self.clips[i].input.clone()),
            input_tokens: 0,
            input_tokens_exact: false,
            max_tokens: self.max_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/audio")
    }

    /// The fixtures' lengths as `soxi -D` gave them when they were made.
    #[test]
    fn lengths_come_from_the_headers() {
        let clips = load(&fixtures()).unwrap();
        let got: Vec<(String, f64)> =
            clips.iter().map(|c| (c.input.file_name.clone(), c.input.seconds)).collect();
        let want =
            [("speech-1.wav", 3.082875), ("speech-2.flac", 2.834625), ("speech-3.wav", 1.087562)];
        assert_eq!(got.len(), 3);
        for ((n, s), (wn, ws)) in got.iter().zip(want) {
            assert_eq!(n, wn);
            assert!((s - ws).abs() < 1e-5, "{n}: {s} s");
        }
        assert_eq!(clips[1].input.mime, "audio/flac");
    }

    #[test]
    fn a_dataset_names_its_files_and_its_errors_name_the_line() {
        let d = std::env::temp_dir().join(format!("quetta-audio-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(fixtures().join("speech-3.wav"), d.join("a.wav")).unwrap();
        std::fs::write(d.join("set.jsonl"), "{\"audio\": \"a.wav\", \"prompt\": \"Greetings\"}\n")
            .unwrap();
        let clips = load(&d.join("set.jsonl")).unwrap();
        assert_eq!(clips[0].input.prompt.as_deref(), Some("Greetings"));
        std::fs::write(
            d.join("bad.jsonl"),
            "{\"audio\": \"a.wav\"}\n{\"audio\": \"missing.wav\"}\n",
        )
        .unwrap();
        let e = load(&d.join("bad.jsonl")).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl:2") && e.contains("missing.wav"), "{e}");
        std::fs::write(d.join("x.mp3"), b"ID3").unwrap();
        let e = clip(&d.join("x.mp3"), None).unwrap_err().to_string();
        assert!(e.contains("WAV or FLAC"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
