//! Scraping a server's `/metrics` during a run: one tokio task, a fixed interval, each
//! scrape's known quantities appended to a JSONL file as it arrives, and the run deltas at
//! the end. A failed scrape is recorded (and counted), never fatal.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::oneshot;

use crate::prom;
use crate::server::{self, Reading};

/// What to scrape.
#[derive(Debug, Clone)]
pub struct ScrapeConfig {
    /// The full URL of the metrics endpoint (e.g. `http://host:8000/metrics`).
    pub url: String,
    pub interval: Duration,
    /// Sent as `Authorization: Bearer` (never written anywhere).
    pub bearer: Option<quetta_http::fetch::ApiKey>,
    /// Append one JSON line per scrape here.
    pub series: Option<PathBuf>,
}

/// What the scrapes said about the run (the type lives in `quetta-metrics`).
pub use quetta_metrics::ServerReport as ScrapeReport;

#[derive(Serialize)]
struct Line<'a> {
    t_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<&'a BTreeMap<&'static str, Reading>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// A scraper running on the current tokio runtime.
#[derive(Debug)]
pub struct Scraper {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<ScrapeReport>,
}

/// A scrape failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ScrapeError {
    /// The metrics endpoint could not be fetched (in the transport's or server's words).
    #[error("{source}")]
    Fetch { url: String, source: quetta_engine::EngineError },
    /// Its answer is not a Prometheus text exposition.
    #[error("{url}: {source}")]
    Parse { url: String, source: prom::ParseError },
}

/// Scrape once and parse.
pub async fn scrape_once(
    url: &str,
    bearer: Option<&quetta_http::fetch::ApiKey>,
) -> Result<prom::Exposition, ScrapeError> {
    let body = quetta_http::fetch::get(url, bearer, Duration::from_secs(10), 64 << 20)
        .await
        .map_err(|source| ScrapeError::Fetch { url: url.to_owned(), source })?;
    let text = String::from_utf8_lossy(&body);
    prom::parse(&text).map_err(|source| ScrapeError::Parse { url: url.to_owned(), source })
}

impl Scraper {
    /// Start scraping now (the first scrape is immediate).
    pub fn start(cfg: ScrapeConfig) -> Self {
        let (tx, mut rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let t0 = Instant::now();
            let mut file = cfg.series.as_ref().and_then(|p| std::fs::File::create(p).ok());
            let mut readings: Vec<BTreeMap<&'static str, Reading>> = Vec::new();
            let (mut first_t, mut last_t) = (None, None);
            let mut report = ScrapeReport {
                url: cfg.url.clone(),
                server: "unknown".into(),
                scrapes: 0,
                failed_scrapes: 0,
                last_error: None,
                window_s: 0.0,
                deltas: BTreeMap::new(),
            };
            let mut tick = tokio::time::interval(cfg.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_round = false;
            loop {
                if !last_round {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = &mut rx => last_round = true,
                    }
                }
                let at = t0.elapsed();
                match scrape_once(&cfg.url, cfg.bearer.as_ref()).await {
                    Ok(e) => {
                        report.scrapes += 1;
                        if report.server == "unknown" {
                            report.server = server::server_kind(&e).into();
                        }
                        let r = server::read(&e);
                        if let Some(f) = file.as_mut() {
                            let line = Line {
                                t_ms: at.as_secs_f64() * 1e3,
                                values: Some(&r),
                                error: None,
                            };
                            if let Ok(s) = serde_json::to_string(&line) {
                                let _ = writeln!(f, "{s}");
                            }
                        }
                        first_t.get_or_insert(at);
                        last_t = Some(at);
                        readings.push(r);
                    }
                    Err(err) => {
                        let err = err.to_string();
                        report.failed_scrapes += 1;
                        if let Some(f) = file.as_mut() {
                            let line = Line {
                                t_ms: at.as_secs_f64() * 1e3,
                                values: None,
                                error: Some(&err),
                            };
                            if let Ok(s) = serde_json::to_string(&line) {
                                let _ = writeln!(f, "{s}");
                            }
                        }
                        report.last_error = Some(err);
                    }
                }
                if last_round {
                    break;
                }
            }
            if let (Some(a), Some(b)) = (readings.first(), readings.last()) {
                report.deltas = server::deltas(a, b, &readings)
                    .into_iter()
                    .map(|(k, d)| (k.to_owned(), d))
                    .collect();
            }
            if let (Some(a), Some(b)) = (first_t, last_t) {
                report.window_s = b.saturating_sub(a).as_secs_f64();
            }
            report
        });
        Self { stop: Some(tx), task }
    }

    /// Scrape a last time and return the report.
    pub async fn finish(mut self) -> ScrapeReport {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => ScrapeReport {
                url: String::new(),
                server: "unknown".into(),
                scrapes: 0,
                failed_scrapes: 0,
                last_error: Some(format!("the scraper stopped: {e}")),
                window_s: 0.0,
                deltas: BTreeMap::new(),
            },
        }
    }
}
