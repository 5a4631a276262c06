//! A 60-second soak at 200 requests/s with 5 % injected faults (QUETTA_SOAK_SECS shortens
//! it for local runs): memory stays flat and every request is accounted for.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn vm_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn soak_with_faults_keeps_memory_flat_and_loses_nothing() {
    let secs: u64 =
        std::env::var("QUETTA_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let dir = std::env::temp_dir().join(format!("quetta-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let duration = format!("{secs}s");
    let mut child = Command::new(env!("CARGO_BIN_EXE_quetta-bench"))
        .args(["run", "--request-rate", "200", "--arrival", "constant", "--duration", &duration])
        .args([
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--sim-ttft-ms",
            "5",
            "--sim-itl-ms",
            "2",
        ])
        .args([
            "--sim-fault",
            "http503:0.02",
            "--sim-fault",
            "reset-mid-stream:0.02",
            "--sim-fault",
            "bad-json:0.01",
        ])
        .args(["--quiet", "--output-dir", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    let early = Duration::from_secs((secs / 6).max(1));
    while t0.elapsed() < early {
        std::thread::sleep(Duration::from_millis(100));
    }
    let peak_early = vm_kib(pid, "VmHWM:");
    let mut peak_end = peak_early;
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(200));
        let p = vm_kib(pid, "VmHWM:");
        if p > 0 {
            peak_end = p;
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    eprintln!("peak RSS at {} s: {peak_early} KiB; at {secs} s: {peak_end} KiB", early.as_secs());
    assert!(peak_early > 0);
    assert!(
        peak_end as f64 <= peak_early as f64 * 1.10,
        "memory grew: {peak_early} KiB -> {peak_end} KiB"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let lines = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap().lines().count() as u64;
    let (done, failed, dispatched) = (
        s["completed"].as_u64().unwrap(),
        s["failed"].as_u64().unwrap(),
        s["dispatched"].as_u64().unwrap(),
    );
    assert_eq!(done + failed, dispatched);
    assert_eq!(dispatched, lines);
    assert_eq!(dispatched, s["planned"].as_u64().unwrap(), "every planned request was sent");
    let share = failed as f64 / dispatched as f64;
    eprintln!(
        "{dispatched} requests, {failed} failed ({:.1} %), errors {}",
        share * 100.0,
        s["errors"]
    );
    assert!((0.02..0.09).contains(&share), "about 5 % of requests fail: {share}");
    let _ = std::fs::remove_dir_all(&dir);
}
