//! The client's own resource use, from /proc (Linux); zeros elsewhere.

use quetta_report::ClientStats;

/// CPU time (user, system) of this process, in seconds.
fn cpu_times() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return (0.0, 0.0) };
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15, i.e. indices 11 and 12 after ')'; clock ticks
    // are 100 per second on Linux.
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (tick(11), tick(12))
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The machine: hostname, OS, CPU model and count, memory.
pub fn host() -> quetta_report::Host {
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
    quetta_report::Host {
        hostname: read("/etc/hostname").trim().to_owned(),
        os: std::env::consts::OS.into(),
        arch: std::env::consts::ARCH.into(),
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
    }
}

pub fn client_stats(worker_threads: usize) -> ClientStats {
    let (u, s) = cpu_times();
    ClientStats {
        cpu_user_s: u,
        cpu_system_s: s,
        peak_rss_kib: peak_rss_kib(),
        worker_threads,
        host: Some(host()),
    }
}
