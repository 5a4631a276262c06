//! `quetta-probe`: where the time goes.
//!
//! - [`prom`]: a complete parser of the Prometheus text format; [`server`] maps vLLM, SGLang,
//!   TGI and llama.cpp metric names onto common quantities and computes run deltas;
//!   [`scrape`] scrapes `/metrics` during a run.
//! - [`gpu`]: GPU telemetry (NVML through `nvml-wrapper`, loaded at run time) behind a
//!   trait with a fake, sampled on its own thread.
//! - [`probes`]: live-server probes over the engine trait (TTFT against new and cached
//!   tokens, decode grid, herd, KV capacity, stage split), each writing a CSV and a
//!   `meta.json` sidecar.
//! - [`meta`]: the typed `<probe>.meta.json` (every probe's parameters and summary); it
//!   imports no other module of the crate.
//! - [`calibrate`]: the probes and fits behind a twin's server model (`quetta-sim --server-model`).
//! - [`recheck`]: a calibrated model against its server now, rescaled to the server's
//!   present speed.
//! - [`kernels`]: summaries of CUDA kernel activity recorded by the `quetta-cupti`
//!   injection library.

pub mod calibrate;
pub mod gpu;
pub mod kernels;
pub mod meta;
pub mod probes;
pub mod prom;
pub mod recheck;
pub mod scrape;
pub mod server;
