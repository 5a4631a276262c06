//! What the server's side says about a run: its own Prometheus counters ([`ServerReport`],
//! read by `quetta-probe`'s scraper) and its GPUs ([`GpuReport`], folded here from the samples
//! `quetta-probe`'s sampler takes). Plain data and the definitions of energy, energy per
//! output token and the prefix-cache hit rate; no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The change of one server quantity over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerDelta {
    /// Counter: the increase. Histogram: the increase of `_sum`. Gauge: the last value.
    pub delta: f64,
    /// Histograms: the increase of `_count` and Δsum ÷ Δcount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// Gauges: the largest value seen in any scrape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// What the server's own metrics said over a run (`--server-metrics`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerReport {
    pub url: String,
    /// `vllm`, `sglang`, `llama.cpp`, `tgi` or `unknown`, by the metric names.
    pub server: String,
    pub scrapes: u64,
    pub failed_scrapes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// From the first to the last successful scrape (seconds).
    pub window_s: f64,
    /// Per quantity (`prompt_tokens`, `queue_time_s`, ...): the increase over the window
    /// (counters, histogram sums and counts, with the mean per event), or the last and
    /// largest value (gauges).
    pub deltas: BTreeMap<String, ServerDelta>,
}

impl ServerReport {
    /// The server's prefix-cache hit rate over the run (hits ÷ queries), when it counts both.
    pub fn prefix_cache_hit_rate(&self) -> Option<f64> {
        let d = |k: &str| self.deltas.get(k).map(|d| d.delta);
        hit_rate(d("prefix_cache_hits")?, d("prefix_cache_queries")?)
    }

    /// The mean of a histogram quantity (e.g. `queue_time_s`), in its own unit.
    pub fn mean(&self, key: &str) -> Option<f64> {
        self.deltas.get(key).and_then(|d| d.mean)
    }
}

/// Hits ÷ queries, 0..=1; `None` without queries. The one definition of a cache hit rate
/// (the server's prefix cache here, a turn's cached share of its prompt in the per-turn table).
pub fn hit_rate(hits: f64, queries: f64) -> Option<f64> {
    (queries > 0.0).then(|| (hits / queries).clamp(0.0, 1.0))
}

/// One reading of one GPU (a line of `gpu.jsonl`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Milliseconds from the sampler's start (aligned with the run).
    pub t_ms: f64,
    pub gpu: u32,
    pub power_w: Option<f64>,
    /// The driver's energy counter (millijoules since the driver loaded; Volta and newer).
    pub energy_mj: Option<u64>,
    pub sm_util_pct: Option<u32>,
    pub mem_util_pct: Option<u32>,
    pub mem_used_mib: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    /// NVML's throttle-reason bit mask (0: not throttled).
    pub throttle_reasons: Option<u64>,
}

/// Where a device's energy figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EnergySource {
    /// The driver's energy counter, first to last sample.
    Counter,
    /// Power integrated over time (trapezoids between samples).
    Integrated,
    /// Not enough samples.
    None,
}

/// One GPU over the sampled window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub gpu: u32,
    pub name: String,
    pub samples: u64,
    pub avg_power_w: Option<f64>,
    pub max_power_w: Option<f64>,
    /// Energy over the window, in joules.
    pub energy_j: Option<f64>,
    pub energy_source: EnergySource,
    pub avg_sm_util_pct: Option<f64>,
    pub max_mem_used_mib: Option<u64>,
    pub max_temperature_c: Option<u32>,
    /// Samples taken while a throttle reason other than idle was set.
    pub throttled_samples: u64,
}

/// Every GPU over the sampled window, and the run's energy per output token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    pub interval_ms: f64,
    pub window_s: f64,
    pub devices: Vec<DeviceReport>,
    /// Sums over the devices.
    pub avg_power_w: Option<f64>,
    pub energy_j: Option<f64>,
    /// `energy_j` ÷ the run's output tokens (filled in with the run's token count).
    #[serde(default)]
    pub energy_per_output_token_j: Option<f64>,
}

/// Joules per output token: energy over the window ÷ the run's output tokens.
pub fn energy_per_token_j(energy_j: Option<f64>, output_tokens: u64) -> Option<f64> {
    energy_j.filter(|_| output_tokens > 0).map(|e| e / output_tokens as f64)
}

impl GpuReport {
    /// Fold samples (in time order) into a report: per device the average and largest
    /// power, the energy (from the driver's counter where every sample has it, else power
    /// integrated over time), utilisation, memory, temperature and throttling.
    pub fn from_samples(names: &[String], samples: &[GpuSample], interval_ms: f64) -> Self {
        let mut devices = Vec::new();
        let mut window_s: f64 = 0.0;
        for (gpu, name) in names.iter().enumerate() {
            let s: Vec<&GpuSample> = samples.iter().filter(|x| x.gpu == gpu as u32).collect();
            let d = device(gpu as u32, name, &s);
            if let (Some(a), Some(b)) = (s.first(), s.last()) {
                window_s = window_s.max((b.t_ms - a.t_ms) / 1e3);
            }
            devices.push(d);
        }
        let sum = |f: fn(&DeviceReport) -> Option<f64>| {
            let v: Vec<f64> = devices.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        };
        GpuReport {
            interval_ms,
            window_s,
            avg_power_w: sum(|d| d.avg_power_w),
            energy_j: sum(|d| d.energy_j),
            devices,
            energy_per_output_token_j: None,
        }
    }

    /// The same report with the energy per output token of a run that produced
    /// `output_tokens`.
    pub fn with_output_tokens(mut self, output_tokens: u64) -> Self {
        self.energy_per_output_token_j = energy_per_token_j(self.energy_j, output_tokens);
        self
    }
}

/// One device's samples (in time order) folded.
fn device(gpu: u32, name: &str, s: &[&GpuSample]) -> DeviceReport {
    let powers: Vec<(f64, f64)> = s.iter().filter_map(|x| x.power_w.map(|p| (x.t_ms, p))).collect();
    let avg = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    // Trapezoids between consecutive power readings.
    let integrated: f64 =
        powers.windows(2).map(|w| (w[1].0 - w[0].0) / 1e3 * (w[0].1 + w[1].1) / 2.0).sum();
    let counter = match (s.first().and_then(|x| x.energy_mj), s.last().and_then(|x| x.energy_mj)) {
        (Some(a), Some(b)) if b >= a && s.len() > 1 => Some((b - a) as f64 / 1e3),
        _ => None,
    };
    let (energy_j, energy_source) = match counter {
        Some(e) => (Some(e), EnergySource::Counter),
        None if powers.len() > 1 => (Some(integrated), EnergySource::Integrated),
        None => (None, EnergySource::None),
    };
    const IDLE: u64 = 0x1; // nvmlClocksThrottleReasonGpuIdle
    DeviceReport {
        gpu,
        name: name.to_owned(),
        samples: s.len() as u64,
        avg_power_w: avg(&powers.iter().map(|p| p.1).collect::<Vec<_>>()),
        max_power_w: powers.iter().map(|p| p.1).reduce(f64::max),
        energy_j,
        energy_source,
        avg_sm_util_pct: avg(&s
            .iter()
            .filter_map(|x| x.sm_util_pct.map(f64::from))
            .collect::<Vec<_>>()),
        max_mem_used_mib: s.iter().filter_map(|x| x.mem_used_mib).max(),
        max_temperature_c: s.iter().filter_map(|x| x.temperature_c).max(),
        throttled_samples: s
            .iter()
            .filter(|x| x.throttle_reasons.is_some_and(|r| r & !IDLE != 0))
            .count() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_integrates_power_and_prefers_the_energy_counter() {
        let s = |t: f64, gpu: u32, p: f64, e: Option<u64>| GpuSample {
            t_ms: t,
            gpu,
            power_w: Some(p),
            energy_mj: e,
            sm_util_pct: Some(50),
            throttle_reasons: Some(if t > 1500.0 { 0x4 } else { 0x1 }),
            ..GpuSample::default()
        };
        // GPU 0: 100 W then 300 W over 2 s with no counter: 1 s at 200 W + 1 s at 300 W
        // (trapezoids of 100→300 and 300→300) = 200 + 300 = 500 J.
        // GPU 1: counter from 10,000 mJ to 460,000 mJ: 450 J.
        let samples = vec![
            s(0.0, 0, 100.0, None),
            s(0.0, 1, 200.0, Some(10_000)),
            s(1000.0, 0, 300.0, None),
            s(1000.0, 1, 250.0, Some(250_000)),
            s(2000.0, 0, 300.0, None),
            s(2000.0, 1, 200.0, Some(460_000)),
        ];
        let r = GpuReport::from_samples(&["a".into(), "b".into()], &samples, 1000.0);
        assert_eq!(r.devices[0].energy_source, EnergySource::Integrated);
        assert!((r.devices[0].energy_j.unwrap() - 500.0).abs() < 1e-9);
        assert_eq!(r.devices[1].energy_source, EnergySource::Counter);
        assert!((r.devices[1].energy_j.unwrap() - 450.0).abs() < 1e-9);
        assert!((r.energy_j.unwrap() - 950.0).abs() < 1e-9);
        assert!((r.devices[0].avg_power_w.unwrap() - 700.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.devices[0].throttled_samples, 1, "idle is not throttling");
        assert!((r.window_s - 2.0).abs() < 1e-9);
        let r = r.with_output_tokens(950);
        assert!((r.energy_per_output_token_j.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(energy_per_token_j(Some(1.0), 0), None);
    }

    #[test]
    fn hit_rates() {
        assert_eq!(hit_rate(3.0, 4.0), Some(0.75));
        assert_eq!(hit_rate(0.0, 0.0), None);
        let mut deltas = BTreeMap::new();
        let d = |delta| ServerDelta { delta, count: None, mean: None, max: None };
        deltas.insert("prefix_cache_hits".to_owned(), d(30.0));
        deltas.insert("prefix_cache_queries".to_owned(), d(40.0));
        let r = ServerReport {
            url: String::new(),
            server: "vllm".into(),
            scrapes: 2,
            failed_scrapes: 0,
            last_error: None,
            window_s: 1.0,
            deltas,
        };
        assert_eq!(r.prefix_cache_hit_rate(), Some(0.75));
    }
}
