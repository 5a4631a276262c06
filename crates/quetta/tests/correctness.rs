//! The correctness check against a strict little server that reads the spelled number and
//! answers its digits, except every 4th answer, which is off by one.

mod common;

use quetta::correctness::Correctness;
use quetta::report::{files, schema, RunDir};
use quetta::Target;

/// Words to a number, independently of the library's spelling code.
fn words_to_number(s: &str) -> Option<u64> {
    let small = |w: &str| -> Option<u64> {
        let ones = [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ];
        let tens =
            ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
        if let Some(i) = ones.iter().position(|x| *x == w) {
            return Some(i as u64);
        }
        if let Some((t, o)) = w.split_once('-') {
            return Some(
                tens.iter().position(|x| *x == t)? as u64 * 10
                    + ones.iter().position(|x| *x == o)? as u64,
            );
        }
        tens.iter().position(|x| *x == w).map(|i| i as u64 * 10)
    };
    let (mut total, mut cur) = (0u64, 0u64);
    for w in s.split_whitespace() {
        match w {
            "hundred" => cur *= 100,
            "thousand" | "million" | "billion" => {
                let scale = match w {
                    "thousand" => 1_000,
                    "million" => 1_000_000,
                    _ => 1_000_000_000,
                };
                total += cur * scale;
                cur = 0;
            }
            _ => cur += small(w)?,
        }
    }
    Some(total + cur)
}

#[test]
fn correctness_counts_wrong_answers() {
    use std::io::{BufRead, BufReader, Read, Write};
    // A strict little server on 127.0.0.1: it reads the spelled number and answers its digits,
    // except for every 4th request, which it answers off by one.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let s2 = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let served = s2.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let text = v["messages"][0]["content"].as_str().unwrap().to_owned();
                let words =
                    text.split("number: ").nth(1).unwrap().split(". Output").next().unwrap();
                let n = words_to_number(words).expect("words the server understands");
                let k = served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = if k % 4 == 3 { n + 1 } else { n };
                let chunk = |c: &str, fin: &str| {
                    format!("data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{c}\"}},\"finish_reason\":{fin}}}]}}\n\n")
                };
                let sse = format!(
                    "{}{}data: [DONE]\n\n",
                    chunk(&answer.to_string(), "null"),
                    chunk("", "\"stop\"")
                );
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{sse}");
            });
        }
    });
    let mut c = Correctness::new(Target::openai(format!("http://{addr}")).model("m"));
    (c.requests, c.concurrency) = (40, 1);
    let r = common::rt().block_on(c.run()).unwrap();
    assert_eq!(r.answered, 40);
    assert_eq!(r.mismatches, 10, "every 4th answer is wrong");
    assert_eq!(r.mismatch_rate, 0.25);
    assert_eq!(r.examples.len(), 5);
    assert!(r.examples.iter().all(|e| words_to_number(&e.words) == Some(e.number)));
    let d = common::tmpdir("correct");
    let dir = RunDir::create(&d, false).unwrap();
    dir.write_correctness(&r).unwrap();
    common::validate(
        schema::CORRECTNESS,
        &common::json(&d.join(files::CORRECTNESS)),
        "correctness.json",
    );
    let _ = std::fs::remove_dir_all(&d);
}
