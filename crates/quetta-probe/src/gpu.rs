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

pub use quetta_metrics::telemetry::{DeviceReport, EnergySource, GpuReport, GpuSample};

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

/// Fold samples (in time order) into a report (the definition lives in `quetta-metrics`).
pub fn report(names: &[String], samples: &[GpuSample], interval: Duration) -> GpuReport {
    GpuReport::from_samples(names, samples, interval.as_secs_f64() * 1e3)
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
        // every line as docs/schema/gpu.schema.json pins it
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/schema/gpu.schema.json")).unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        for l in lines.lines() {
            let line: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v.is_valid(&line), "{line}");
        }
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
