//! `quetta-report`: what a run leaves behind and what a person reads.
//!
//! - [`RunDir`]: the results directory (create, overwrite, open, read back, rebuild the
//!   summary of a killed run in one call), with every file it holds produced from a typed
//!   struct: [`RunManifest`] (`run.json`), records (`requests.jsonl`), [`Summary`]
//!   (`summary.json`), the per-second series (`timeseries.jsonl`), [`SweepReport`],
//!   [`SloReport`], [`CompareReport`], [`CorrectnessReport`] and [`export::VllmResult`];
//!   each has a JSON Schema in `docs/schema` ([`schema`]) that tests validate real outputs
//!   against;
//! - [`compare()`]: two runs' per-request metrics with bootstrap intervals and Mann-Whitney
//!   tests; [`export`]: CSV, Parquet and vLLM's result JSON;
//! - the terminal tables ([`render_summary`], [`SweepReport::render`], ...), `report.html`
//!   ([`html`], self-contained) and `report.pdf` ([`pdf`]), drawing the same [`chart`]s.

pub mod chart;
mod compare;
mod dir;
pub mod export;
pub mod html;
mod merge;
mod note;
pub mod parquet;
pub mod pdf;
mod repeats;
mod summary;
mod sweep;
mod terminal;

pub use compare::{
    compare, compare_sides, CompareOptions, CompareReport, CompareSide, MetricComparison,
    COMPARE_SAMPLE,
};
pub use dir::{
    files, parse_records, stream_records, Records, ReportError, RunDir, RunManifest, Tool,
};
pub use merge::{merge, MergeOptions};
pub use note::Note;
pub use repeats::{RepeatFigure, RepeatRun, RepeatsReport, UntilCi};
pub use summary::{
    ArrivalKind, ClientStats, HistoryKind, Host, LoadKind, Mode, PacingKind, PartialReason,
    RunSettings, SessionSettings, SessionsSummary, ShardResult, ShardRun, ShardsSummary,
    SimSettings, SteadySummary, Summary, Target, PREDICTED_BACKEND, SCHEMA_VERSION, SUMMARY_SCHEMA,
};
pub use sweep::{SloProbe, SloReport, SweepKind, SweepReport, SweepStep};
pub use terminal::{
    error_lines, failed_label, metric_table, partial_label, render_summary, turn_table,
    verdict_line, workload_failed,
};

use serde::{Deserialize, Serialize};

/// The JSON Schemas of every file Quetta writes (`docs/schema`), for validating outputs.
pub mod schema {
    pub const SUMMARY: &str = include_str!("../../../docs/schema/summary.schema.json");
    pub const RUN: &str = include_str!("../../../docs/schema/run.schema.json");
    pub const REQUEST: &str = include_str!("../../../docs/schema/request.schema.json");
    pub const SERIES: &str = include_str!("../../../docs/schema/timeseries.schema.json");
    pub const SWEEP: &str = include_str!("../../../docs/schema/sweep.schema.json");
    pub const REPEATS: &str = include_str!("../../../docs/schema/repeats.schema.json");
    pub const SLO: &str = include_str!("../../../docs/schema/slo.schema.json");
    pub const COMPARE: &str = include_str!("../../../docs/schema/compare.schema.json");
    pub const CORRECTNESS: &str = include_str!("../../../docs/schema/correctness.schema.json");
    pub const VLLM: &str = include_str!("../../../docs/schema/vllm_result.schema.json");
    pub const SERVER_METRICS: &str =
        include_str!("../../../docs/schema/server_metrics.schema.json");
    pub const GPU: &str = include_str!("../../../docs/schema/gpu.schema.json");
    /// A fitted workload distribution (`dist.json`).
    pub const DISTRIBUTION: &str = include_str!("../../../docs/schema/distribution.schema.json");
}

/// One wrong answer of a correctness check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectnessExample {
    pub number: u64,
    pub words: String,
    pub reply: String,
}

/// `correctness.json`: numbers spelled in words, and how often the model's digits were wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectnessReport {
    pub model: String,
    pub requests: u64,
    /// Requests that completed (and so gave an answer).
    pub answered: u64,
    pub failed: u64,
    pub mismatches: u64,
    /// Mismatches ÷ answered.
    pub mismatch_rate: f64,
    /// Up to 5 wrong answers.
    pub examples: Vec<CorrectnessExample>,
    pub request_throughput: f64,
}

impl RunDir {
    pub fn write_sweep(&self, r: &SweepReport) -> Result<(), ReportError> {
        dir::write_json(&self.file(files::SWEEP), r)
    }

    pub fn read_sweep(&self) -> Result<SweepReport, ReportError> {
        dir::read_json(&self.file(files::SWEEP))
    }

    pub fn write_repeats(&self, r: &RepeatsReport) -> Result<(), ReportError> {
        dir::write_json(&self.file(files::REPEATS), r)
    }

    pub fn read_repeats(&self) -> Result<RepeatsReport, ReportError> {
        dir::read_json(&self.file(files::REPEATS))
    }

    pub fn write_slo(&self, r: &SloReport) -> Result<(), ReportError> {
        dir::write_json(&self.file(files::SLO), r)
    }

    pub fn read_slo(&self) -> Result<SloReport, ReportError> {
        dir::read_json(&self.file(files::SLO))
    }

    pub fn write_compare(&self, r: &CompareReport) -> Result<(), ReportError> {
        dir::write_json(&self.file(files::COMPARE), r)
    }

    pub fn write_correctness(&self, r: &CorrectnessReport) -> Result<(), ReportError> {
        dir::write_json(&self.file(files::CORRECTNESS), r)
    }

    /// Write vLLM's result JSON (`vllm_result.json` unless `to` says otherwise), compact as
    /// vLLM writes it; [`export::write_vllm`] streams the same bytes from the records.
    pub fn write_vllm(
        &self,
        r: &export::VllmResult,
        to: &std::path::Path,
    ) -> Result<(), ReportError> {
        let text = serde_json::to_string(r)
            .map_err(|e| ReportError::Invalid(format!("{}: {e}", to.display())))?;
        std::fs::write(to, text + "\n")
            .map_err(|source| ReportError::Write { path: to.display().to_string(), source })
    }
}

/// UTC RFC 3339 time (seconds) for a Unix timestamp (`YYYY-MM-DDTHH:MM:SSZ`).
pub fn rfc3339(unix_s: u64) -> String {
    let t = i64::try_from(unix_s)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339).expect("a UTC time in years 0-9999")
}

/// Now, as [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

/// Seconds since the epoch of an RFC 3339 time such as `YYYY-MM-DDTHH:MM:SSZ` (years 1970
/// to 9999; `None` for anything else).
pub fn unix_of(t: &str) -> Option<u64> {
    let t = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_030_235), "2026-11-30T09:17:15Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(unix_of("2026-11-30T09:17:15Z"), Some(1_796_030_235));
        for t in [0, 951_782_400, 1_796_030_235, 4_102_444_800] {
            assert_eq!(unix_of(&rfc3339(t)), Some(t));
        }
        assert_eq!(unix_of("99999-01-01T00:00:00Z"), None);
        assert_eq!(unix_of("2026-13-01T00:00:00Z"), None);
    }
}
