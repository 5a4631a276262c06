//! The client's own resource use over one run: CPU time from `getrusage` (microseconds; Unix,
//! zeros elsewhere) as the difference between the run's end and its start, and also from
//! the process's start to the run's end; from `/proc` (Linux) the peak resident set
//! after resetting the process's high-water mark at the start (`/proc/self/clear_refs`), so
//! that each step of a sweep reports its own figures, not the process's so far.

use quetta_metrics::{ClientStats, Host};

/// CPU time (user, system) of this process since it started, in seconds.
#[cfg(unix)]
fn cpu_times() -> (f64, f64) {
    use nix::sys::resource::{getrusage, UsageWho};
    use nix::sys::time::TimeValLike;
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let s = |t: nix::sys::time::TimeVal| t.num_microseconds() as f64 / 1e6;
            (s(u.user_time()), s(u.system_time()))
        }
        Err(_) => (0.0, 0.0),
    }
}

#[cfg(not(unix))]
fn cpu_times() -> (f64, f64) {
    (0.0, 0.0)
}

/// A line's number from /proc/self/status, in KiB.
fn status_kib(field: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
    })
}

/// Measures one run; [`Usage::finish`] gives its figures.
#[derive(Debug, Clone)]
pub struct Usage {
    cpu: (f64, f64),
    scope: &'static str,
}

impl Usage {
    /// Start measuring: note the CPU time and reset the peak RSS to the current RSS.
    pub fn start() -> Self {
        // "5" resets the high-water mark of the resident set (Linux 4.0 and newer).
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let scope = match (reset, status_kib("VmHWM:").is_some()) {
            (true, _) => "benchmark",
            (false, true) => "process",
            (false, false) => "unknown",
        };
        Self { cpu: cpu_times(), scope }
    }

    /// The run's figures so far.
    pub fn finish(&self, worker_threads: usize) -> ClientStats {
        let (u, s) = cpu_times();
        // to 0.1 ms
        let round = |v: f64| (v * 1e4).round() / 1e4;
        ClientStats {
            cpu_user_s: round((u - self.cpu.0).max(0.0)),
            cpu_system_s: round((s - self.cpu.1).max(0.0)),
            process_cpu_user_s: round(u),
            process_cpu_system_s: round(s),
            peak_rss_kib: status_kib("VmHWM:").unwrap_or(0),
            peak_rss_scope: self.scope.into(),
            worker_threads,
            host: Some(host()),
        }
    }
}

/// The machine: hostname, OS, CPU model and count, memory.
pub fn host() -> Host {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or_else(String::new, |(_, v)| v.trim().to_owned());
    let mem_kib: f64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0);
    Host {
        hostname: read("/etc/hostname").trim().to_owned(),
        os: std::env::consts::OS.into(),
        arch: std::env::consts::ARCH.into(),
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each measurement covers its own span: a peak reached before the start is not in it,
    /// and CPU burnt before the start is not counted.
    #[test]
    fn a_measurement_covers_only_its_own_span() {
        if !cfg!(target_os = "linux") {
            return;
        }
        // an earlier "step": 64 MiB touched, then freed, and some CPU
        let big = vec![1u8; 64 << 20];
        let sum: u64 = big.iter().map(|&b| u64::from(b)).sum();
        drop(big);
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let before = status_kib("VmHWM:").unwrap();
        let u = Usage::start();
        let s = u.finish(1);
        assert!(sum > 0 && x > 0);
        assert!(s.cpu_user_s + s.cpu_system_s < 0.2, "{s:?}");
        // the process's own figure holds the earlier 300 ms of spinning
        assert!(s.process_cpu_user_s + s.process_cpu_system_s >= 0.25, "{s:?}");
        if s.peak_rss_scope == "benchmark" {
            assert!(
                s.peak_rss_kib + 32 * 1024 < before,
                "peak reset: {} vs {before} KiB",
                s.peak_rss_kib
            );
        }
    }
}
