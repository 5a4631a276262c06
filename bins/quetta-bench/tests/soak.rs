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
    // Resident memory sampled every 200 ms: the median of the second sixth of the run
    // against that of the last sixth. A leak moves both medians apart; a transient (a burst
    // of requests in flight after a stall, which the high-water mark keeps for good) does
    // not. The high-water marks are printed beside them.
    let t0 = Instant::now();
    let mut samples: Vec<(f64, u64)> = Vec::new();
    let (mut hwm_early, mut hwm_end) = (0, 0);
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(200));
        let rss = vm_kib(pid, "VmRSS:");
        if rss > 0 {
            samples.push((t0.elapsed().as_secs_f64(), rss));
        }
        let hwm = vm_kib(pid, "VmHWM:");
        hwm_end = hwm.max(hwm_end);
        if t0.elapsed() < Duration::from_secs((secs / 3).max(1)) {
            hwm_early = hwm.max(hwm_early);
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    let s6 = secs as f64 / 6.0;
    let median = |from: f64, to: f64| {
        let mut v: Vec<u64> =
            samples.iter().filter(|(t, _)| (from..to).contains(t)).map(|s| s.1).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let (early, late) = (median(s6, 2.0 * s6), median(5.0 * s6, secs as f64));
    eprintln!(
        "RSS median {early} KiB ({:.0}-{:.0} s), {late} KiB ({:.0}-{secs} s); high-water mark {hwm_early} KiB by {} s, {hwm_end} KiB at the end",
        s6,
        2.0 * s6,
        5.0 * s6,
        secs / 3
    );
    assert!(early > 0 && late > 0, "{samples:?}");
    assert!(late as f64 <= early as f64 * 1.10, "memory grew: {early} KiB -> {late} KiB");
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
