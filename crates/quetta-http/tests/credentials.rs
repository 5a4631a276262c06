//! A bearer token goes only to the origin it was given for (scheme, host and port): a
//! redirect to another port of the same host, as a proxy's `/metrics` pointing at the
//! engine behind it, gets no `Authorization` header.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Seen = Arc<Mutex<Vec<String>>>;

/// A listener that records every request's head and answers with `answer(path)`.
fn listener(answer: impl Fn(&str) -> String + Send + 'static) -> (u16, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
            log.lock().unwrap().push(head);
            let _ = s.write_all(answer(&path).as_bytes());
        }
    });
    (port, seen)
}

fn ok(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
}

fn get(rt: &tokio::runtime::Runtime, url: &str) -> Vec<u8> {
    let key = quetta_http::fetch::ApiKey::new("sk-canary");
    let f = quetta_http::fetch::get(url, Some(&key), Duration::from_secs(10), 1 << 20);
    rt.block_on(f).unwrap()
}

#[test]
fn a_redirect_to_another_port_carries_no_key() {
    let (engine, engine_seen) = listener(|_| ok("vllm:num_requests_running 1\n"));
    let (proxy, proxy_seen) = listener(move |_| {
        format!("HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{engine}/metrics\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let body = get(&rt, &format!("http://127.0.0.1:{proxy}/metrics"));
    assert_eq!(body, b"vllm:num_requests_running 1\n");
    let to_proxy = proxy_seen.lock().unwrap().join("").to_ascii_lowercase();
    let to_engine = engine_seen.lock().unwrap().join("").to_ascii_lowercase();
    assert!(to_proxy.contains("authorization: bearer sk-canary"), "{to_proxy}");
    assert!(
        !to_engine.contains("sk-canary") && !to_engine.contains("authorization"),
        "{to_engine}"
    );
    // the same origin keeps it: a redirect within the proxy
    let (same, same_seen) = listener(|path| {
        if path == "/metrics" {
            "HTTP/1.1 301 Moved\r\nlocation: /real-metrics\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into()
        } else {
            ok("x 1\n")
        }
    });
    assert_eq!(get(&rt, &format!("http://127.0.0.1:{same}/metrics")), b"x 1\n");
    let seen = same_seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|h| h.contains("sk-canary")), "{seen:?}");
}

#[test]
fn origins_compare_scheme_host_and_port() {
    use quetta_http::fetch::origin;
    let o = |s: &str| origin(&s.parse().unwrap());
    assert_eq!(o("http://h/metrics"), o("http://H:80/x"));
    assert_eq!(o("https://h/"), o("https://h:443/"));
    assert_ne!(o("http://h:8000/"), o("http://h:8001/"));
    assert_ne!(o("http://h/"), o("https://h/"));
}
