//! How the client itself fared during a run: is the load generator the bottleneck?

use serde::{Deserialize, Serialize};

/// The client's resource use over one benchmark (not over the process: each step of a sweep
/// reports its own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientStats {
    /// CPU time the process spent in user and system mode during the benchmark, in seconds.
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    /// CPU time of the process from its start to the benchmark's end (the tokenizer, the
    /// workload, the pre-flight and earlier steps included), in seconds.
    #[serde(default)]
    pub process_cpu_user_s: f64,
    #[serde(default)]
    pub process_cpu_system_s: f64,
    /// Peak resident memory during the benchmark, in KiB (the process's high-water mark,
    /// reset at the benchmark's start where the OS allows; see `peak_rss_scope`).
    pub peak_rss_kib: u64,
    /// `benchmark` when the high-water mark was reset at the start, `process` when it covers
    /// the process's whole life (the reset was refused), `unknown` elsewhere.
    #[serde(default = "unknown")]
    pub peak_rss_scope: String,
    pub worker_threads: usize,
    /// The client machine (a saved baseline says where it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
}

fn unknown() -> String {
    "unknown".into()
}

impl Default for ClientStats {
    /// Nothing known (a rebuilt run).
    fn default() -> Self {
        Self {
            cpu_user_s: 0.0,
            cpu_system_s: 0.0,
            process_cpu_user_s: 0.0,
            process_cpu_system_s: 0.0,
            peak_rss_kib: 0,
            peak_rss_scope: unknown(),
            worker_threads: 0,
            host: None,
        }
    }
}

/// The machine a run was measured from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    pub os: String,
    pub arch: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
}
