//! GPU telemetry: a [`GpuSource`] (NVML, or [`FakeGpu`] for tests) sampled by a [`Sampler`]
//! on its own thread at a fixed interval, each sample written to a JSONL file as it is
//! taken (times in milliseconds from the sampler's start, aligned with the run), and a
//! [`GpuReport`] at the end: average power, energy (from the driver's energy counter where
//! the GPU has one, else the power integrated over time), per device and in total.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One reading of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuSample {
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

/// Something that reads GPUs.
pub trait GpuSource: Send {
    fn device_count(&self) -> u32;
    fn device_name(&self, gpu: u32) -> String;
    /// Read one GPU (`t_ms` is filled in by the sampler). A field the GPU does not
    /// support is `None`.
    fn sample(&mut self, gpu: u32) -> GpuSample;
}

/// NVML, through `nvml-wrapper` (the library is loaded at run time).
#[cfg(feature = "nvml")]
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    count: u32,
}

#[cfg(feature = "nvml")]
impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml").field("count", &self.count).finish_non_exhaustive()
    }
}

#[cfg(feature = "nvml")]
impl GpuSource for Nvml {
    fn device_count(&self) -> u32 {
        self.count
    }
    fn device_name(&self, gpu: u32) -> String {
        self.nvml
            .device_by_index(gpu)
            .and_then(|d| d.name())
            .unwrap_or_else(|_| format!("gpu{gpu}"))
    }
    fn sample(&mut self, gpu: u32) -> GpuSample {
        use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
        let Ok(d) = self.nvml.device_by_index(gpu) else {
            return GpuSample { gpu, ..GpuSample::default() };
        };
        let util = d.utilization_rates().ok();
        GpuSample {
            t_ms: 0.0,
            gpu,
            power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
            energy_mj: d.total_energy_consumption().ok(),
            sm_util_pct: util.as_ref().map(|u| u.gpu),
            mem_util_pct: util.as_ref().map(|u| u.memory),
            mem_used_mib: d.memory_info().ok().map(|m| m.used >> 20),
            sm_clock_mhz: d.clock_info(Clock::SM).ok(),
            mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
            temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
            throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
        }
    }
}

/// Open NVML, or say in one line why not ("no NVIDIA driver ..."). The run goes on either way.
pub fn open_nvml() -> Result<Box<dyn GpuSource>, String> {
    #[cfg(feature = "nvml")]
    {
        let nvml = nvml_wrapper::Nvml::init().map_err(|e| {
            format!("no NVIDIA driver: NVML could not be loaded ({e}); GPU telemetry is off")
        })?;
        let count = nvml.device_count().map_err(|e| format!("NVML: cannot count GPUs: {e}"))?;
        if count == 0 {
            return Err("NVML found no GPU; GPU telemetry is off".into());
        }
        Ok(Box::new(Nvml { nvml, count }))
    }
    #[cfg(not(feature = "nvml"))]
    {
        Err("built without the `nvml` feature; GPU telemetry is off".into())
    }
}

/// A fake GPU for tests: constant power and utilisation, an energy counter that advances
/// with the wall clock.
#[derive(Debug, Clone)]
pub struct FakeGpu {
    pub power_w: Vec<f64>,
    pub sm_util_pct: u32,
    /// Report the energy counter (like Volta and newer) or leave it out.
    pub energy_counter: bool,
    start: Instant,
}

impl FakeGpu {
    pub fn new(power_w: Vec<f64>, sm_util_pct: u32, energy_counter: bool) -> Self {
        Self { power_w, sm_util_pct, energy_counter, start: Instant::now() }
    }
}

impl GpuSource for FakeGpu {
    fn device_count(&self) -> u32 {
        self.power_w.len() as u32
    }
    fn device_name(&self, gpu: u32) -> String {
        format!("Fake GPU {gpu}")
    }
    fn sample(&mut self, gpu: u32) -> GpuSample {
        let p = self.power_w[gpu as usize];
        let mj = (p * self.start.elapsed().as_secs_f64() * 1e3) as u64 + 1_000_000;
        GpuSample {
            t_ms: 0.0,
            gpu,
            power_w: Some(p),
            energy_mj: self.energy_counter.then_some(mj),
            sm_util_pct: Some(self.sm_util_pct),
            mem_util_pct: Some(self.sm_util_pct / 2),
            mem_used_mib: Some(40_960),
            sm_clock_mhz: Some(1980),
            mem_clock_mhz: Some(2619),
            temperature_c: Some(55),
            throttle_reasons: Some(0),
        }
    }
}

/// One GPU over the sampled window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceReport {
    pub gpu: u32,
    pub name: String,
    pub samples: u64,
    pub avg_power_w: Option<f64>,
    pub max_power_w: Option<f64>,
    /// Energy over the window, in joules.
    pub energy_j: Option<f64>,
    /// `counter` (the driver's energy counter) or `integrated` (power × time).
    pub energy_source: &'static str,
    pub avg_sm_util_pct: Option<f64>,
    pub max_mem_used_mib: Option<u64>,
    pub max_temperature_c: Option<u32>,
    /// Samples taken while a throttle reason other than idle was set.
    pub throttled_samples: u64,
}

/// Every GPU over the sampled window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuReport {
    pub interval_ms: f64,
    pub window_s: f64,
    pub devices: Vec<DeviceReport>,
    /// Sums over the devices.
    pub avg_power_w: Option<f64>,
    pub energy_j: Option<f64>,
}

impl GpuReport {
    /// Joules per output token, given the run's output tokens.
    pub fn energy_per_token_j(&self, output_tokens: u64) -> Option<f64> {
        self.energy_j.filter(|_| output_tokens > 0).map(|e| e / output_tokens as f64)
    }
}

/// Fold samples (in time order) into a report.
pub fn report(names: &[String], samples: &[GpuSample], interval: Duration) -> GpuReport {
    let mut devices = Vec::new();
    let mut window_s: f64 = 0.0;
    for (gpu, name) in names.iter().enumerate() {
        let s: Vec<&GpuSample> = samples.iter().filter(|x| x.gpu == gpu as u32).collect();
        let powers: Vec<(f64, f64)> =
            s.iter().filter_map(|x| x.power_w.map(|p| (x.t_ms, p))).collect();
        let span_s = match (s.first(), s.last()) {
            (Some(a), Some(b)) => (b.t_ms - a.t_ms) / 1e3,
            _ => 0.0,
        };
        window_s = window_s.max(span_s);
        let avg = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        // Trapezoids between consecutive power readings.
        let integrated: f64 =
            powers.windows(2).map(|w| (w[1].0 - w[0].0) / 1e3 * (w[0].1 + w[1].1) / 2.0).sum();
        let counter =
            match (s.first().and_then(|x| x.energy_mj), s.last().and_then(|x| x.energy_mj)) {
                (Some(a), Some(b)) if b >= a && s.len() > 1 => Some((b - a) as f64 / 1e3),
                _ => None,
            };
        let (energy_j, energy_source) = match counter {
            Some(e) => (Some(e), "counter"),
            None if powers.len() > 1 => (Some(integrated), "integrated"),
            None => (None, "none"),
        };
        const IDLE: u64 = 0x1; // nvmlClocksThrottleReasonGpuIdle
        devices.push(DeviceReport {
            gpu: gpu as u32,
            name: name.clone(),
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
        });
    }
    let sum = |f: fn(&DeviceReport) -> Option<f64>| {
        let v: Vec<f64> = devices.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    GpuReport {
        interval_ms: interval.as_secs_f64() * 1e3,
        window_s,
        avg_power_w: sum(|d| d.avg_power_w),
        energy_j: sum(|d| d.energy_j),
        devices,
    }
}

/// Samples GPUs on a thread of its own until finished.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<GpuReport>>,
}

impl Sampler {
    /// Start sampling every `interval`, appending samples to `series` (JSONL) if given.
    pub fn start(
        mut source: Box<dyn GpuSource>,
        interval: Duration,
        series: Option<PathBuf>,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("quetta-gpu".into())
            .spawn(move || {
                let names: Vec<String> =
                    (0..source.device_count()).map(|i| source.device_name(i)).collect();
                let mut file = series.and_then(|p| std::fs::File::create(p).ok());
                let t0 = Instant::now();
                let mut all = Vec::new();
                let mut next = t0;
                loop {
                    let last = stop2.load(Ordering::SeqCst);
                    for gpu in 0..names.len() as u32 {
                        let mut s = source.sample(gpu);
                        s.t_ms = t0.elapsed().as_secs_f64() * 1e3;
                        if let Some(f) = file.as_mut() {
                            if let Ok(line) = serde_json::to_string(&s) {
                                let _ = writeln!(f, "{line}");
                            }
                        }
                        all.push(s);
                    }
                    if last {
                        break;
                    }
                    next += interval;
                    // Absolute deadlines; wake early enough to see a stop within 50 ms.
                    while Instant::now() < next && !stop2.load(Ordering::SeqCst) {
                        let left = next.saturating_duration_since(Instant::now());
                        std::thread::sleep(left.min(Duration::from_millis(50)));
                    }
                }
                report(&names, &all, interval)
            })
            .expect("spawn the GPU sampler thread");
        Self { stop, thread: Some(thread) }
    }

    /// Take a last sample and return the report.
    pub fn finish(mut self) -> GpuReport {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().expect("running").join().expect("GPU sampler thread")
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
        let r = report(&["a".into(), "b".into()], &samples, Duration::from_secs(1));
        assert_eq!(r.devices[0].energy_source, "integrated");
        assert!((r.devices[0].energy_j.unwrap() - 500.0).abs() < 1e-9);
        assert_eq!(r.devices[1].energy_source, "counter");
        assert!((r.devices[1].energy_j.unwrap() - 450.0).abs() < 1e-9);
        assert!((r.energy_j.unwrap() - 950.0).abs() < 1e-9);
        assert!((r.devices[0].avg_power_w.unwrap() - 700.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.devices[0].throttled_samples, 1, "idle is not throttling");
        assert!((r.window_s - 2.0).abs() < 1e-9);
        assert!((r.energy_per_token_j(950).unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn sampler_on_the_fake_gpu() {
        let dir = std::env::temp_dir().join(format!("quetta-gpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let series = dir.join("gpu.jsonl");
        let s = Sampler::start(
            Box::new(FakeGpu::new(vec![400.0, 100.0], 80, true)),
            Duration::from_millis(20),
            Some(series.clone()),
        );
        std::thread::sleep(Duration::from_millis(300));
        let r = s.finish();
        assert_eq!(r.devices.len(), 2);
        assert!(r.devices[0].samples >= 10, "{}", r.devices[0].samples);
        assert_eq!(r.devices[0].avg_power_w, Some(400.0));
        // 500 W in total for ~0.3 s: about 150 J from the fake's energy counter
        let e = r.energy_j.unwrap();
        assert!((e / (500.0 * r.window_s) - 1.0).abs() < 0.1, "{e} J over {} s", r.window_s);
        let lines = std::fs::read_to_string(&series).unwrap();
        assert_eq!(lines.lines().count() as u64, r.devices[0].samples * 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_a_driver_nvml_says_so_in_one_line() {
        // This machine has no NVIDIA driver (CI neither); where one exists, NVML opens.
        match open_nvml() {
            Ok(src) => assert!(src.device_count() > 0),
            Err(e) => {
                assert!(!e.contains('\n'));
                assert!(
                    e.contains("no NVIDIA driver") || e.contains("no GPU") || e.contains("feature"),
                    "{e}"
                );
            }
        }
    }
}
