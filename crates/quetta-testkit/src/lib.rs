//! What Quetta's own tests share. A dev-dependency of the crates whose tests run against the
//! real llama.cpp server; nothing outside the workspace's tests uses it.

/// The variable `.ci/run` sets to the URL of the llama.cpp server it started
/// (`scripts/llama-server-start.sh`).
pub const LLAMA_URL_VAR: &str = "QUETTA_LLAMA_URL";

/// The variable `.ci/run` sets to the URL of the same server in embeddings mode
/// (`scripts/llama-server-start.sh PORT "" 2 mean`: `/v1/embeddings`).
pub const LLAMA_EMBED_URL_VAR: &str = "QUETTA_LLAMA_EMBED_URL";

/// The variable `.ci/run` sets to the URL of the same server in rank pooling
/// (`scripts/llama-server-start.sh PORT "" 2 rank`: `/v1/rerank`).
pub const LLAMA_RERANK_URL_VAR: &str = "QUETTA_LLAMA_RERANK_URL";

/// The real llama.cpp server's URL (`QUETTA_LLAMA_URL`). Outside CI a missing server skips
/// the test, saying so on stderr; under CI (`CI` set) it is a failure, so a CI run cannot
/// pass without the tests against the real server.
pub fn llama_url() -> Option<String> {
    llama_url_from(
        LLAMA_URL_VAR,
        std::env::var(LLAMA_URL_VAR).ok(),
        std::env::var_os("CI").is_some(),
    )
}

/// The real llama.cpp server in embeddings mode (`QUETTA_LLAMA_EMBED_URL`), as [`llama_url`].
pub fn llama_embed_url() -> Option<String> {
    let var = LLAMA_EMBED_URL_VAR;
    llama_url_from(var, std::env::var(var).ok(), std::env::var_os("CI").is_some())
}

/// The real llama.cpp server in rank pooling (`QUETTA_LLAMA_RERANK_URL`), as [`llama_url`].
pub fn llama_rerank_url() -> Option<String> {
    let var = LLAMA_RERANK_URL_VAR;
    llama_url_from(var, std::env::var(var).ok(), std::env::var_os("CI").is_some())
}

fn llama_url_from(var: &str, url: Option<String>, ci: bool) -> Option<String> {
    match url {
        Some(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                !ci,
                "CI must start the llama.cpp server (scripts/llama-server-start.sh) and set {var}"
            );
            eprintln!("SKIPPED: {var} is not set (start scripts/llama-server-start.sh)");
            None
        }
    }
}

/// The CPU `scripts/llama-server-start.sh` pins the server to: `QUETTA_LLAMA_CPU`, else the
/// last of `cpus` when there are two or more; `None` when it is unpinned.
fn llama_cpu_from(var: Option<String>, cpus: usize) -> Option<usize> {
    match var.as_deref() {
        Some("none") => None,
        Some(v) if !v.is_empty() => v.parse().ok(),
        _ => (cpus >= 2).then(|| cpus - 1),
    }
}

/// Keep the calling thread, and every thread and process it starts from now on, off the CPU
/// the llama.cpp server is pinned to, as a client on its own machine would be: a test that
/// compares timings with the server's leaves its one compute thread a CPU of its own. Linux
/// only; elsewhere, or with the server unpinned, it does nothing. Returns the server's CPU
/// when it moved the thread.
pub fn keep_off_llama_cpu() -> Option<usize> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let cpu = llama_cpu_from(std::env::var("QUETTA_LLAMA_CPU").ok(), cpus)?;
    #[cfg(target_os = "linux")]
    {
        let mut set = rustix::thread::CpuSet::new();
        (0..cpus).filter(|c| *c != cpu).for_each(|c| set.set(c));
        rustix::thread::sched_setaffinity(None, &set).ok().map(|()| cpu)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        None
    }
}

/// Lower the calling thread's priority to `nice` (0 to 19; Linux keeps one per thread), as
/// the simulator's `nice` setting does for its own threads: a test that compares the
/// simulator's timing with what the machine allows measures the machine at the same
/// priority. Best effort; elsewhere it does nothing.
pub fn lower_thread_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        let _ = rustix::process::setpriority_process(None, nice.min(19));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(test)]
mod tests {
    use super::{llama_cpu_from, llama_url_from, LLAMA_URL_VAR};

    #[test]
    fn the_server_cpu_is_the_last_of_two_or_more_unless_set() {
        assert_eq!(llama_cpu_from(None, 2), Some(1));
        assert_eq!(llama_cpu_from(None, 16), Some(15));
        assert_eq!(llama_cpu_from(None, 1), None);
        assert_eq!(llama_cpu_from(Some("none".into()), 4), None);
        assert_eq!(llama_cpu_from(Some("2".into()), 4), Some(2));
        assert_eq!(llama_cpu_from(Some(String::new()), 4), Some(3));
    }

    #[test]
    fn a_set_url_is_used_and_a_missing_one_skips_outside_ci() {
        assert_eq!(
            llama_url_from(LLAMA_URL_VAR, Some("http://127.0.0.1:8089".into()), true).as_deref(),
            Some("http://127.0.0.1:8089")
        );
        assert_eq!(llama_url_from(LLAMA_URL_VAR, Some(String::new()), false), None);
        assert_eq!(llama_url_from(LLAMA_URL_VAR, None, false), None);
    }

    #[test]
    #[should_panic(expected = "CI must start the llama.cpp server")]
    fn a_missing_url_fails_under_ci() {
        let _ = llama_url_from(LLAMA_URL_VAR, None, true);
    }
}

/// A KServe v2 gRPC server of another implementation than Quetta's
/// (`scripts/kserve-grpc-server.py`: Python's grpcio with `tritonclient`'s generated stubs),
/// on 127.0.0.1; stopped when dropped.
#[derive(Debug)]
pub struct KserveServer {
    child: std::process::Child,
    /// Its port.
    pub port: u16,
    /// Its JSON-lines log: per request, when it was read and each response handed over.
    pub log: std::path::PathBuf,
}

impl KserveServer {
    /// Start it with these arguments (`--ttft-ms`, `--itl-ms`, `--api-key`). Without Python's
    /// `grpcio` and `tritonclient` the test is skipped (`None`, said on stderr) outside CI and
    /// fails under CI (`.ci/run` installs them).
    pub fn start(args: &[&str]) -> Option<Self> {
        use std::io::BufRead;
        let probe = std::process::Command::new("python3")
            .args(["-c", "import grpc, tritonclient.grpc"])
            .output();
        if !probe.is_ok_and(|o| o.status.success()) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must install Python's grpcio and tritonclient (pip install 'tritonclient[grpc]')"
            );
            eprintln!(
                "skipped: no Python grpcio and tritonclient (pip install 'tritonclient[grpc]')"
            );
            return None;
        }
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/kserve-grpc-server.py");
        let log = std::env::temp_dir().join(format!(
            "quetta-kserve-{}-{}.jsonl",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .args(["--port", "0", "--log"])
            .arg(&log)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let out = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line).expect("the server says its port");
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the KServe server did not start: {line:?}"));
        Some(Self { child, port, log })
    }

    /// Its `grpc://` URL.
    pub fn url(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }

    /// Its log, a JSON value per request.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

impl Drop for KserveServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `at` on CLOCK_MONOTONIC in nanoseconds: the clock `Instant` reads, and Python's
/// `time.monotonic_ns()`, so instants of two processes on one machine compare directly.
#[cfg(target_os = "linux")]
pub fn monotonic_ns(at: std::time::Instant) -> f64 {
    let now = std::time::Instant::now();
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let mono = t.tv_sec as f64 * 1e9 + t.tv_nsec as f64;
    let back = now.saturating_duration_since(at).as_nanos() as f64;
    let ahead = at.saturating_duration_since(now).as_nanos() as f64;
    mono - back + ahead
}
