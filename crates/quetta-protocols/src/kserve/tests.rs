//! Unit tests.

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/grpc");
    std::fs::read(p.join(name)).unwrap()
}

/// The texts of the content events of `body` fed in pieces of `split` bytes, and the
/// result.
fn feed(
    d: &mut KserveDecoder,
    body: &[u8],
    split: usize,
) -> (Vec<String>, Result<(), EngineError>) {
    let mut texts = Vec::new();
    let mut out = |k: EventKind| {
        if let EventKind::Content(d) = k {
            texts.push(d.text.unwrap_or_default());
        }
    };
    for piece in body.chunks(split) {
        if let Err(e) = d.on_data(piece, &mut out) {
            return (texts, Err(e));
        }
    }
    let r = d.on_end(&mut out);
    (texts, r)
}

/// Answers written with the stubs `tritonclient` generates (fixtures/grpc), split at
/// every size: the same events.
#[test]
fn answers_from_the_published_protobuf_at_every_split() {
    let stream = fixture("kserve-stream.bin");
    let error = fixture("kserve-error.bin");
    for split in 1..=stream.len() {
        let mut d = KserveDecoder::new(true, true, 1 << 20);
        let (t, r) = feed(&mut d, &stream, split);
        r.unwrap();
        assert_eq!(t, [" The", " cat", " sat"], "split {split}");
        assert!(d.is_done() && d.final_seen, "the empty final response ends it");
        let mut d = KserveDecoder::new(true, true, 1 << 20);
        let (t, r) = feed(&mut d, &error, split.min(error.len()));
        assert_eq!(t, [" a"]);
        assert_eq!(r, Err(EngineError::ServerError("model crashed".into())));
    }
    for (f, want) in
        [("kserve-unary.bin", " The cat sat"), ("kserve-unary-contents.bin", " contents")]
    {
        let mut d = KserveDecoder::new(false, true, 1 << 20);
        let mut texts = Vec::new();
        d.decode_full(&fixture(f), &mut |k| {
            if let EventKind::Content(c) = k {
                texts.push(c.text.unwrap_or_default());
            }
        })
        .unwrap();
        assert_eq!(texts, [want], "{f}");
        assert!(d.is_done());
    }
}

/// The reading in place gives prost's reading wherever it answers, on generated
/// responses of every shape, and it answers for the shape servers send.
#[test]
fn the_reading_in_place_is_prosts() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut taken = 0;
    for _ in 0..3000 {
        let mut r = pb::ModelInferResponse {
            model_name: "ensemble".into(),
            id: next(100).to_string(),
            ..Default::default()
        };
        for k in 0..next(3) {
            let name = if next(3) == 0 { "other" } else { TEXT_OUTPUT };
            let mut t = pb::InferTensor {
                name: name.into(),
                datatype: "BYTES".into(),
                shape: vec![1, i64::try_from(k).unwrap()],
                ..Default::default()
            };
            if next(5) == 0 {
                t.contents = Some(pb::InferTensorContents {
                    bytes_contents: vec![b"c".to_vec()],
                    ..Default::default()
                });
            }
            r.outputs.push(t);
        }
        for _ in 0..next(3) {
            let e = match next(4) {
                0 => b"\x03\x00\x00\x00abc".to_vec(),
                1 => b"\x09\x00\x00\x00short".to_vec(),
                2 => [bytes_element(b" a"), bytes_element(b"\xff")].concat(),
                _ => bytes_element(b" word"),
            };
            r.raw_output_contents.push(e);
        }
        for _ in 0..next(3) {
            let (key, p) = match next(4) {
                0 => (FINAL, Parameter::BoolParam(next(2) == 0)),
                1 => (FINAL, Parameter::Int64Param(1)),
                2 => ("sequence_id", Parameter::StringParam("x".into())),
                _ => ("other", Parameter::BoolParam(true)),
            };
            r.parameters.insert(key.into(), InferParameter { parameter_choice: Some(p) });
        }
        let unary = r.encode_to_vec();
        let s = pb::ModelStreamInferResponse {
            error_message: if next(8) == 0 { "failed".into() } else { String::new() },
            infer_response: (next(10) != 0).then_some(r),
        };
        let stream = s.encode_to_vec();
        check_reader_against_prost(true, &stream);
        check_reader_against_prost(false, &unary);
        taken += usize::from(read::stream_reply(&stream).is_some());
    }
    assert!(taken > 1500, "the reading in place took {taken} of 3000");
    // an output named twice, the first name not UTF-8: prost refuses it, and so does the
    // reading in place (fuzz/reproducers/kserve/name-twice-invalid-utf8)
    let twice = [
        18u8, 1, 49, 42, 14, 10, 5, b't', b'e', b'x', b't', 0xff, 10, 5, b'B', b'Y', b'T', b'E',
        b'S',
    ];
    assert_eq!(read::unary_reply(&twice), None);
    check_reader_against_prost(false, &twice);
    // a parameter's value given twice is merged by prost: left to it
    let mut e = pb::ModelInferResponse::default();
    e.parameters.insert(FINAL.into(), InferParameter::bool(true));
    let mut m = e.encode_to_vec();
    // (the map entry is the whole message: its length grows by the empty second value)
    m[1] += 2;
    m.extend_from_slice(&[18, 0]);
    assert_eq!(read::unary_reply(&m), None, "{m:?}");
    check_reader_against_prost(false, &m);
    for f in ["kserve-stream.bin", "kserve-error.bin"] {
        let body = fixture(f);
        let mut rest = &body[..];
        while let Some(head) = rest.get(..5) {
            let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
            let m = &rest[5..5 + len];
            assert!(read::stream_reply(m).is_some(), "{f}: the usual shape is read in place");
            check_reader_against_prost(true, m);
            rest = &rest[5 + len..];
        }
    }
}

/// What follows the final response is drained unread, however the bytes are split
/// (fuzz/reproducers/kserve/after-final-bad-frame: a frame flagged compressed after it
/// failed the answer read whole, not the same answer read in pieces).
#[test]
fn bytes_after_the_final_response_are_drained_unread() {
    let mut body = fixture("kserve-stream.bin");
    body.extend_from_slice(&[1, 0, 0, 0, 2, 0xff, 0xff]);
    for split in [1, 7, body.len()] {
        let mut d = KserveDecoder::new(true, false, 1 << 20);
        let (t, r) = feed(&mut d, &body, split);
        assert_eq!((t.len(), r), (3, Ok(())), "split {split}");
    }
}

#[test]
fn the_status_in_trailers_or_headers_in_grpcs_words() {
    let h = |code: &str, msg: &str| {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", code.parse().unwrap());
        h.insert("grpc-message", msg.parse().unwrap());
        h
    };
    let mut d = KserveDecoder::new(true, false, 1 << 20);
    assert_eq!(
        d.on_trailers(&h("16", "invalid%20API%20key")),
        Err(EngineError::Auth("UNAUTHENTICATED: invalid API key".into()))
    );
    assert_eq!(
        d.on_headers(&h("8", "quota")),
        Err(EngineError::Throttled("RESOURCE_EXHAUSTED: quota".into()))
    );
    assert!(matches!(d.on_trailers(&http::HeaderMap::new()), Err(EngineError::Protocol(_))));
    assert_eq!(d.on_trailers(&h("0", "")), Ok(()));
    assert!(d.is_done(), "a call that ends OK is complete without a final flag");
    // a message larger than allowed, and a compressed one, are refused
    let mut d = KserveDecoder::new(true, false, 10);
    assert!(matches!(d.on_data(&[0, 0, 0, 0, 11], &mut |_| {}), Err(EngineError::Protocol(_))));
    let mut d = KserveDecoder::new(true, false, 10);
    assert!(matches!(d.on_data(&[1, 0, 0, 0, 1, 0], &mut |_| {}), Err(EngineError::Protocol(_))));
}

/// Triton's vLLM backend: the sampling parameters in one JSON string, the prompt left
/// out of the answer.
#[test]
fn the_request_to_the_vllm_backend() {
    let mut req = EngineRequest::new(3, Prompt::Text("hi".into()));
    req.max_tokens = Some(7);
    req.ignore_eos = true;
    let r = KserveGrpc { tensors: Tensors::Vllm }.request("vllm_model", &req).unwrap();
    let names: Vec<&str> = r.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["text_input", "stream", "sampling_parameters", "exclude_input_in_output"]);
    assert_eq!(names, Tensors::Vllm.always_sent());
    let sp = bytes_elements(&r.raw_input_contents[2]).unwrap()[0];
    let sp: Value = serde_json::from_slice(sp).unwrap();
    assert_eq!(sp, serde_json::json!({"max_tokens": 7, "ignore_eos": true, "min_tokens": 7}));
    assert_eq!(r.raw_input_contents[3], [1]);
    assert_eq!(r.outputs[0].name, TEXT_OUTPUT);
}

/// A parameter's double given in 32 bits: prost refuses the message, so the reading in
/// place must leave it to prost (the fuzz target's `double-param-32-bit`).
#[test]
fn a_double_parameter_in_32_bits_is_left_to_prost() {
    let param = [37u8, 0, 0, 0, 0]; // double_param (4) with wire type 5
    let mut entry = vec![0x0a, 1, b'x', 0x12, param.len() as u8];
    entry.extend(param);
    let mut m = vec![34u8, entry.len() as u8]; // parameters (4)
    m.extend(&entry);
    assert!(ModelInferResponse::decode(m.as_slice()).is_err());
    assert!(read::unary_reply(&m).is_none());
    check_reader_against_prost(false, &m);
}

#[test]
fn the_request_is_the_ensembles() {
    let mut req = EngineRequest::new(9, Prompt::Text("hi".into()));
    req.max_tokens = Some(5);
    req.ignore_eos = true;
    let r = KserveGrpc::default().request("ensemble", &req).unwrap();
    let names: Vec<&str> = r.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["text_input", "max_tokens", "min_length", "stream"]);
    assert_eq!(r.raw_input_contents[0], bytes_element(b"hi"));
    assert_eq!(r.raw_input_contents[1], 5i32.to_le_bytes());
    assert_eq!(r.raw_input_contents[2], 5i32.to_le_bytes(), "ignore_eos forces the length");
    assert_eq!(r.id, "9");
    assert_eq!(r.parameters.get(EMPTY_FINAL), Some(&InferParameter::bool(true)));
    let framed = frame(&r);
    assert_eq!(framed[0], 0);
    assert_eq!(u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize, framed.len() - 5);
    let ids = EngineRequest::new(1, Prompt::TokenIds(vec![1, 2]));
    assert!(KserveGrpc::default().request("ensemble", &ids).is_err(), "the ensemble takes text");
}
