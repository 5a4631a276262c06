//! What runs beside a benchmark: the server's Prometheus metrics, the local GPUs, and the
//! cache reset before the measured phase.

use std::sync::Arc;
use std::time::Duration;

use quetta_loadgen::BeforeMeasured;
use quetta_metrics::{GpuReport, ServerReport};
use quetta_probe::gpu::Sampler;
use quetta_probe::scrape::{ScrapeConfig, Scraper};
use quetta_report::{files, RunDir};

use crate::target::Connected;
use crate::Telemetry;

/// `path` under the target's base URL.
fn url_of(c: &Connected, path: &str) -> String {
    format!("{}/{}", c.base_url.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// The hook that POSTs to `path` of the target between the warmup and the measured phase;
/// its failure stops the run in the server's own words.
pub(crate) fn reset_hook(c: &Connected, path: &str) -> BeforeMeasured {
    let url = url_of(c, path);
    let key = c.same_origin_key().cloned();
    let insecure = c.insecure();
    BeforeMeasured(Arc::new(move || {
        let url = url.clone();
        let key = key.clone();
        Box::pin(async move {
            quetta_http::fetch::post_empty(&url, key.as_ref(), insecure, Duration::from_secs(30))
                .await
                .map(|_| ())
                .map_err(|e| {
                    format!(
                        "{}: POST {url} failed: {e}",
                        quetta_engine::setting::Setting::ResetPrefixCache
                    )
                })
        })
    }))
}

/// The scraper and the GPU sampler of one run.
pub(crate) struct Running {
    scraper: Option<Scraper>,
    gpu: Option<Sampler>,
    gpu_note: Option<String>,
}

impl Running {
    /// Start what `t` asks for; series go to `dir` when there is one.
    pub(crate) fn start(t: &Telemetry, c: &Connected, dir: Option<&RunDir>) -> Self {
        let scraper = t.server_metrics.as_ref().map(|u| {
            // a key goes only where it was given for: the target's own for its /metrics,
            // an explicit one for an explicit URL (and fetch drops it on a redirect to
            // another origin)
            let (url, bearer) = if u == "auto" {
                (url_of(c, "metrics"), c.same_origin_key().cloned())
            } else {
                (u.clone(), t.server_metrics_key.clone())
            };
            Scraper::start(ScrapeConfig {
                url,
                interval: t.server_metrics_interval,
                bearer,
                series: dir.map(|d| d.file(files::SERVER_METRICS)),
            })
        });
        let (gpu, gpu_note) = if t.gpu {
            match quetta_probe::gpu::open_nvml() {
                Ok(src) => (
                    Some(Sampler::start(src, t.gpu_interval, dir.map(|d| d.file(files::GPU)))),
                    None,
                ),
                Err(e) => (None, Some(e)),
            }
        } else {
            (None, None)
        };
        Self { scraper, gpu, gpu_note }
    }

    /// The scrape report, and the GPU report or why there is none.
    pub(crate) async fn finish(
        self,
    ) -> (Option<ServerReport>, (Option<GpuReport>, Option<String>)) {
        let server = match self.scraper {
            Some(s) => Some(s.finish().await),
            None => None,
        };
        let gpu = self.gpu.map(Sampler::finish);
        (server, (gpu, self.gpu_note))
    }
}
