//! Unit tests.

use super::*;

fn run(d: &mut dyn EventDecoder, events: &[&str]) -> (Vec<EventKind>, Result<(), EngineError>) {
    let mut v = Vec::new();
    for e in events {
        if let Err(err) = d.on_event(b"", e.as_bytes(), &mut |k| v.push(k)) {
            return (v, Err(err));
        }
    }
    (v, Ok(()))
}

/// Events as the project's llama.cpp server sends them (captured).
#[test]
fn llamacpp_tokens_usage_and_timings() {
    let mut d = LlamaCppDecoder::new(true);
    let (ev, r) = run(
        &mut d,
        &[
            r#"{"index":0,"content":"-","tokens":[29],"stop":false,"id_slot":-1,"tokens_predicted":1,"tokens_evaluated":2}"#,
            r#"{"index":0,"content":"","tokens":[18053],"stop":false,"tokens_predicted":2,"tokens_evaluated":2}"#,
            r#"{"index":0,"content":"","tokens":[],"id_slot":2,"stop":true,"tokens_predicted":2,"tokens_evaluated":2,"stop_type":"limit","timings":{"cache_n":1,"prompt_n":1,"prompt_ms":35.59,"predicted_n":2,"predicted_per_token_ms":16.3}}"#,
        ],
    );
    r.unwrap();
    assert!(d.done);
    assert_eq!(d.finish_reason.as_deref(), Some("length"));
    assert_eq!(ev.iter().filter(|e| e.is_token()).count(), 2, "an id without text is a token");
    assert!(ev.contains(&EventKind::Usage(Usage::tokens(Some(2), Some(2)).with_cached(Some(1)))));
}

#[test]
fn tgi_last_event_carries_a_token_and_the_details() {
    let mut d = TgiDecoder::new(false);
    let (ev, r) = run(
        &mut d,
        &[
            r#"{"index":1,"token":{"id":5,"text":" a","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#,
            r#"{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":" a","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null,"input_length":7}}"#,
        ],
    );
    r.unwrap();
    assert!(d.done);
    assert_eq!(ev.iter().filter(|e| e.is_token()).count(), 2);
    assert_eq!(ev.last(), Some(&EventKind::Usage(Usage::tokens(Some(7), Some(2)))));
    assert_eq!(d.finish_reason.as_deref(), Some("stop"));
    let (_, r) = run(
        &mut TgiDecoder::new(false),
        &[r#"{"error":"Input validation error","error_type":"validation"}"#],
    );
    assert_eq!(r, Err(EngineError::ServerError("validation: Input validation error".into())));
}

#[test]
fn sglang_cumulative_text_is_cut_into_deltas() {
    let mut d = SglangDecoder::new(true);
    let (ev, r) = run(
        &mut d,
        &[
            r#"{"text":" The","meta_info":{"prompt_tokens":5,"completion_tokens":1,"finish_reason":null}}"#,
            r#"{"text":" The cat","meta_info":{"prompt_tokens":5,"completion_tokens":2,"finish_reason":null}}"#,
            r#"{"text":" The cat","meta_info":{"prompt_tokens":5,"completion_tokens":2,"cached_tokens":3,"finish_reason":{"type":"length","length":2}}}"#,
            "[DONE]",
        ],
    );
    r.unwrap();
    assert!(d.done);
    assert_eq!(
        ev,
        vec![
            EventKind::Content(Delta::text(" The")),
            EventKind::Content(Delta::text(" cat")),
            EventKind::Usage(Usage::tokens(Some(5), Some(2)).with_cached(Some(3))),
        ]
    );
    assert_eq!(d.finish_reason.as_deref(), Some("length"));
}

#[test]
fn sglang_increments_are_read_as_increments_when_text_is_kept() {
    let mut d = SglangDecoder::new(true);
    let (ev, r) = run(
        &mut d,
        &[
            r#"{"text":" The","meta_info":{"completion_tokens":1,"finish_reason":null}}"#,
            r#"{"text":" cat","meta_info":{"completion_tokens":2,"finish_reason":null}}"#,
            r#"{"text":" sat on it","meta_info":{"completion_tokens":5,"finish_reason":null}}"#,
        ],
    );
    r.unwrap();
    let text: String = ev
        .iter()
        .filter_map(|e| match e {
            EventKind::Content(d) => d.text.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(text, " The cat sat on it");
}

/// The cut-out text (`split_text`) reads every event as serde reads it whole: each event
/// is decoded as sent and again behind a leading space, which serde takes and the cut
/// does not, over generated streams of texts with escapes, control and non-ASCII
/// characters, and of events that are malformed around the text.
#[test]
fn sglang_text_cut_out_reads_as_serde_does() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let pieces =
        [" the", " cat", "\\\"", "\\\\", "\\n", "\\u00e9", "é", "\u{1}", "\\u0001", "~", "\u{7f}"];
    let tails = [
        r#","meta_info":{"completion_tokens":N,"finish_reason":null}}"#,
        r#", "meta_info":{"completion_tokens":N,"prompt_tokens":3,"finish_reason":{"type":"length"}},"index":0}"#,
        r#","meta_info":{"completion_tokens":N,"finish_reason":{"type":"abort","message":"x"}}}"#,
        "}",
        ",}",
        r#" ,"meta_info":{}}"#,
        r#","text":"dup"}"#,
        r#","error":"overloaded"}"#,
        r#","meta_info":{"completion_tokens":"N"}}"#,
        "",
    ];
    for capture in [false, true] {
        for _ in 0..400 {
            let (mut fast, mut slow) = (SglangDecoder::new(capture), SglangDecoder::new(capture));
            let mut text = String::new();
            for n in 1..=6 {
                for _ in 0..next(3) {
                    text.push_str(pieces[next(pieces.len() as u64) as usize]);
                }
                let tail = tails[next(tails.len() as u64) as usize].replace('N', &n.to_string());
                let event = format!(r#"{{"text":"{text}"{tail}"#);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let ra = fast.on_event(b"", event.as_bytes(), &mut |k| a.push(k));
                let spaced = format!(" {event}");
                let rb = slow.on_event(b"", spaced.as_bytes(), &mut |k| b.push(k));
                assert_eq!(a, b, "{event}");
                assert_eq!(ra.is_ok(), rb.is_ok(), "{event}: {ra:?} {rb:?}");
                if ra.is_err() {
                    break;
                }
                assert_eq!(fast.finish_reason, slow.finish_reason);
            }
        }
    }
}

#[test]
fn triton_has_no_end_marker_and_errors_in_words() {
    let mut d = TritonDecoder::new(false);
    let (ev, r) = run(&mut d, &[r#"{"model_name":"ensemble","text_output":" a"}"#]);
    r.unwrap();
    assert_eq!(ev.len(), 1);
    assert!(!d.is_done() && d.complete_at_body_end());
    let (_, r) = run(&mut TritonDecoder::new(false), &[r#"{"error":"model not ready"}"#]);
    assert_eq!(r, Err(EngineError::ServerError("model not ready".into())));
}
