//! The run directory: every file a run, sweep, SLO search or compare writes, each from a
//! typed struct, and the reading back of each. [`RunDir`] creates (refusing to mix two runs
//! in one directory unless told to overwrite, and then removing only the files Quetta
//! wrote), opens, and rebuilds the summary of a run that was killed.

use std::fs;
use std::path::{Path, PathBuf};

use quetta_metrics::series::{Second, SeriesBuilder, Steadiness};
use quetta_metrics::{Aggregate, RequestRecord, SloSet};
use serde::{Deserialize, Serialize};

use crate::summary::{RunSettings, SteadySummary, Summary, Target, SCHEMA_VERSION};

/// Reading or writing a results directory failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("{path}:{line}: {reason}")]
    Parse { path: String, line: usize, reason: String },
    #[error("output directory {path} already holds a run ({file}); choose another directory or overwrite it")]
    Exists { path: String, file: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Pdf(#[from] crate::pdf::PdfError),
    #[error(transparent)]
    Parquet(#[from] crate::parquet::ParquetError),
}

/// `run.json`: written before the first request, so that a run that dies can be rebuilt
/// from it and `requests.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub schema_version: u32,
    pub tool: String,
    pub tool_version: String,
    /// UTC, RFC 3339 (seconds).
    pub started_at: String,
    pub config: RunSettings,
    pub target: Target,
    /// The run's `--slo` (both kinds), as given.
    pub slo: Option<String>,
    /// Extra percentiles asked for.
    #[serde(default)]
    pub percentiles: Vec<f64>,
    /// A shard of a sharded run: which (its clock, once it has met shard 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::summary::ShardRun>,
}

pub use quetta_engine::tool::Tool;

impl RunManifest {
    /// A manifest stamped now by `tool`.
    pub fn new(
        tool: &Tool,
        config: RunSettings,
        target: Target,
        slo: Option<String>,
        percentiles: Vec<f64>,
    ) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            tool: tool.name.clone(),
            tool_version: tool.version.clone(),
            started_at: crate::now_rfc3339(),
            config,
            target,
            slo,
            percentiles,
            shard: None,
        }
    }
}

/// The files of a results directory.
pub mod files {
    pub const MANIFEST: &str = "run.json";
    pub const REQUESTS: &str = "requests.jsonl";
    pub const SUMMARY: &str = "summary.json";
    pub const SERIES: &str = "timeseries.jsonl";
    pub const SERVER_METRICS: &str = "server_metrics.jsonl";
    pub const GPU: &str = "gpu.jsonl";
    pub const SWEEP: &str = "sweep.json";
    pub const SLO: &str = "slo.json";
    pub const COMPARE: &str = "compare.json";
    pub const CORRECTNESS: &str = "correctness.json";
    pub const HTML: &str = "report.html";
    pub const PDF: &str = "report.pdf";
    pub const CSV: &str = "requests.csv";
    pub const PARQUET: &str = "requests.parquet";
    pub const VLLM: &str = "vllm_result.json";
    pub const REPEATS: &str = "repeats.json";
    /// Every file Quetta writes into a run directory (what overwriting removes, and only that).
    pub const ALL: [&str; 16] = [
        MANIFEST,
        REQUESTS,
        SUMMARY,
        SERIES,
        SERVER_METRICS,
        GPU,
        SWEEP,
        SLO,
        COMPARE,
        CORRECTNESS,
        HTML,
        PDF,
        CSV,
        PARQUET,
        VLLM,
        REPEATS,
    ];
    /// The files whose presence means the directory holds a run.
    pub const RUN: [&str; 6] = [MANIFEST, REQUESTS, SUMMARY, SWEEP, SLO, REPEATS];
}

/// A results directory.
///
/// ```
/// use quetta_report::{files, RunDir};
/// let path = std::env::temp_dir().join(format!("rundir-doc-{}", std::process::id()));
/// let d = RunDir::create(&path, false)?;
/// std::fs::write(d.file(files::REQUESTS), "")?;
/// assert!(RunDir::create(&path, false).is_err(), "a directory holding a run is refused");
/// let d = RunDir::create(&path, true)?; // overwrite: Quetta's own files are removed
/// assert!(!d.file(files::REQUESTS).exists());
/// # std::fs::remove_dir_all(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
}

fn rerr(p: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Read { path: p.display().to_string(), source }
}

pub(crate) fn werr(p: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Write { path: p.display().to_string(), source }
}

/// Write `v` as pretty JSON with a final newline.
pub(crate) fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<(), ReportError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| ReportError::Invalid(format!("{}: {e}", p.display())))?;
    fs::write(p, text + "\n").map_err(werr(p))
}

/// Read a JSON file into `T`, naming the file, line and reason on failure.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(p: &Path) -> Result<T, ReportError> {
    let text = fs::read_to_string(p).map_err(rerr(p))?;
    serde_json::from_str(&text).map_err(|e| ReportError::Parse {
        path: p.display().to_string(),
        line: e.line(),
        reason: e.to_string(),
    })
}

/// Read a JSONL file into `T`s (a missing file is empty; blank lines are skipped).
pub(crate) fn read_jsonl<T: serde::de::DeserializeOwned>(p: &Path) -> Result<Vec<T>, ReportError> {
    if !p.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(p).map_err(rerr(p))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| ReportError::Parse {
                path: p.display().to_string(),
                line: i + 1,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The records of `requests.jsonl` read back; a torn last line (a write cut short by a
/// crash) is left out and said so, any other malformed line is an error naming it.
#[derive(Debug)]
pub struct Records {
    pub records: Vec<RequestRecord>,
    pub torn_last_line: bool,
}

impl RunDir {
    /// Create `path` for a new run. A directory that already holds a run is refused unless
    /// `overwrite`, which removes the files Quetta wrote there before (and nothing else).
    pub fn create(path: impl Into<PathBuf>, overwrite: bool) -> Result<Self, ReportError> {
        let path = path.into();
        if let Some(f) = files::RUN.iter().find(|f| path.join(f).exists()) {
            if !overwrite {
                return Err(ReportError::Exists {
                    path: path.display().to_string(),
                    file: (*f).to_owned(),
                });
            }
        }
        if overwrite {
            remove_own(&path)?;
        }
        fs::create_dir_all(&path).map_err(werr(&path))?;
        Ok(Self { path })
    }

    /// `quetta-results/KIND-TIMESTAMP-PID` (`run-20261201T101500Z-4242`): two commands never
    /// share one, not even two started in the same second.
    pub fn default_path(kind: &str) -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        // within one process (a library run in a loop), a counter tells them apart
        static TAKEN: AtomicU64 = AtomicU64::new(0);
        let stamp: String =
            crate::now_rfc3339().chars().filter(char::is_ascii_alphanumeric).collect();
        let base = format!("{kind}-{stamp}-{}", std::process::id());
        match TAKEN.fetch_add(1, Ordering::Relaxed) {
            0 => PathBuf::from("quetta-results").join(base),
            n => PathBuf::from("quetta-results").join(format!("{base}-{n}")),
        }
    }

    /// An existing results directory.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, ReportError> {
        let path = path.into();
        if !path.is_dir() {
            return Err(ReportError::Invalid(format!("{} is not a directory", path.display())));
        }
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of one of its files ([`files`]).
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn write_manifest(&self, m: &RunManifest) -> Result<(), ReportError> {
        write_json(&self.file(files::MANIFEST), m)
    }

    pub fn read_manifest(&self) -> Result<RunManifest, ReportError> {
        read_json(&self.file(files::MANIFEST))
    }

    /// A new, empty `requests.jsonl` for the runner's sink.
    pub fn create_records(&self) -> Result<fs::File, ReportError> {
        let p = self.file(files::REQUESTS);
        fs::File::create(&p).map_err(werr(&p))
    }

    /// Read `requests.jsonl` back.
    pub fn read_records(&self) -> Result<Records, ReportError> {
        let mut records = Vec::new();
        let torn_last_line = self.for_each_record(|r| records.push(r))?;
        Ok(Records { records, torn_last_line })
    }

    /// Stream `requests.jsonl` through `each` ([`stream_records`]); returns whether its last
    /// line was cut off mid-write.
    pub fn for_each_record(&self, each: impl FnMut(RequestRecord)) -> Result<bool, ReportError> {
        let p = self.file(files::REQUESTS);
        let f = fs::File::open(&p).map_err(rerr(&p))?;
        stream_records(std::io::BufReader::with_capacity(1 << 16, f), &p, each)
    }

    pub fn write_summary(&self, s: &Summary) -> Result<(), ReportError> {
        write_json(&self.file(files::SUMMARY), s)
    }

    pub fn read_summary(&self) -> Result<Summary, ReportError> {
        read_json(&self.file(files::SUMMARY))
    }

    pub fn has_summary(&self) -> bool {
        self.file(files::SUMMARY).is_file()
    }

    /// `timeseries.jsonl`: one line per second of the measured phase.
    pub fn write_series(&self, series: &[Second]) -> Result<(), ReportError> {
        let p = self.file(files::SERIES);
        let mut text = String::new();
        for s in series {
            text.push_str(
                &serde_json::to_string(s).map_err(|e| ReportError::Invalid(e.to_string()))?,
            );
            text.push('\n');
        }
        fs::write(&p, text).map_err(werr(&p))
    }

    pub fn read_series(&self) -> Result<Vec<Second>, ReportError> {
        read_jsonl(&self.file(files::SERIES))
    }

    /// Rebuild the summary (and the time series) of a run that died without writing one,
    /// from `run.json` and the records on disk; the summary is marked partial and says why.
    /// Client figures are unknown for a rebuilt run.
    pub fn rebuild(&self) -> Result<Summary, ReportError> {
        let m = self.read_manifest().ok();
        let slos: Option<SloSet> = match m.as_ref().and_then(|m| m.slo.as_deref()) {
            Some(s) => {
                Some(s.parse().map_err(|e| ReportError::Invalid(format!("run.json: slo: {e}")))?)
            }
            None => None,
        };
        // One pass, one record in memory at a time: the histograms and the series hold
        // the run, not the records.
        // (in parts of the file on threads of their own, merged in file order)
        let init = || (Aggregate::new(slos.clone()), SeriesBuilder::default(), 0u64, 0u64);
        let (parts, torn) = self.fold_records(init, |(agg, series, n, sent), r| {
            agg.add(&r);
            series.add(&r);
            *n += 1;
            *sent += u64::from(r.sent_offset_ms.is_some());
        })?;
        let (mut agg, mut series, mut n, mut sent) = init();
        for (a, s, k, m) in &parts {
            agg.merge(a);
            series.merge(s);
            n += k;
            sent += m;
        }
        let mut notes = vec![crate::Note::Rebuilt { records: n }];
        if torn {
            notes.push(crate::Note::TornRecord);
        }
        notes.push(crate::Note::ClientUnknown);
        let percentiles = m.as_ref().map(|m| m.percentiles.clone()).unwrap_or_default();
        let metrics = agg.summary(&percentiles);
        let m_shard = m.as_ref().and_then(|m| m.shard.clone());
        let (config, target, started_at, tool) = match m {
            Some(m) => (m.config, m.target, m.started_at, Tool::new(m.tool, m.tool_version)),
            None => (
                RunSettings::default(),
                Target::unknown(),
                "1970-01-01T00:00:00Z".into(),
                Tool::library(),
            ),
        };
        let second = series.finish();
        self.write_series(&second)?;
        let mut s = Summary::new(&tool, started_at, config, target, metrics, agg);
        s.partial = true;
        s.partial_reason = Some(crate::PartialReason::Rebuilt);
        s.sent = sent;
        s.notes = notes;
        s.steady_state = series.steadiness(&second);
        if let Some(st) = &s.steady_state {
            s.steady = self.steady(st, slos.as_ref(), &percentiles)?;
        }
        s.shard = m_shard;
        self.write_summary(&s)?;
        Ok(s)
    }

    /// The figures over the steady window `st` found (docs/METRICS.md, Steady state): one
    /// streamed pass over `requests.jsonl`, folding the requests sent in the window, with
    /// rates over the window's length. `None` without a window.
    pub fn steady(
        &self,
        st: &Steadiness,
        slos: Option<&SloSet>,
        percentiles: &[f64],
    ) -> Result<Option<Box<SteadySummary>>, ReportError> {
        let (Some((from, to)), Some(method)) = (st.window_ms(), st.method) else {
            return Ok(None);
        };
        let init = || Aggregate::new(slos.cloned());
        let (parts, _) = self.fold_records(init, |agg, r| {
            let at = r.sent_offset_ms.unwrap_or(r.intended_offset_ms);
            if (from..to).contains(&at) {
                agg.add(&r);
            }
        })?;
        let mut agg = init();
        for a in &parts {
            agg.merge(a);
        }
        (agg.window_start_ms, agg.window_end_ms) = (Some(from), Some(to));
        let (from_s, to_s) = (st.steady_from_s.unwrap_or(0), st.steady_to_s.unwrap_or(0));
        let metrics = agg.summary(percentiles);
        Ok(Some(Box::new(SteadySummary { from_s, to_s, method, metrics })))
    }

    /// `report.html` and `report.pdf` of this run or sweep directory; their paths.
    pub fn write_reports(&self) -> Result<(PathBuf, PathBuf), ReportError> {
        let res = crate::html::load(&self.path)?;
        let html = self.file(files::HTML);
        fs::write(&html, crate::html::render(&res)).map_err(werr(&html))?;
        let pdf = self.file(files::PDF);
        fs::write(&pdf, crate::pdf::render(&res)?).map_err(werr(&pdf))?;
        Ok((html, pdf))
    }

    /// Whether the directory holds a repeated run: `repeats.json` and `run-1/` … `run-N/`.
    pub fn is_repeats(&self) -> bool {
        self.file(files::REPEATS).is_file()
    }

    /// Whether the directory holds a sweep (or an SLO search): steps in subdirectories.
    pub fn is_sweep(&self) -> bool {
        self.file(files::SWEEP).is_file()
    }
}

/// Remove what Quetta wrote in `path` before, and only that: its own files, and the step
/// directories of an earlier sweep or search (`step-*` holding a `run.json`) and the repeats
/// of a repeated run (`run-*`), so that an overwritten sweep shows no stale step.
fn remove_own(path: &Path) -> Result<(), ReportError> {
    for f in files::ALL {
        let p = path.join(f);
        if p.is_file() {
            fs::remove_file(&p).map_err(werr(&p))?;
        }
    }
    let Ok(entries) = fs::read_dir(path) else { return Ok(()) };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let step = name.starts_with("step-") || name.starts_with("run-");
        if step && p.is_dir() && p.join(files::MANIFEST).is_file() {
            remove_own(&p)?;
            // empty now unless it held files of the user's: then it stays
            let _ = fs::remove_dir(&p);
        }
    }
    Ok(())
}

/// Parse the lines of a `requests.jsonl` (`path` names it in errors). A last line that is
/// not a record is a write cut short (`torn_last_line`); any other is refused.
pub fn parse_records(data: &[u8], path: &Path) -> Result<Records, ReportError> {
    let mut records = Vec::new();
    let torn_last_line = stream_records(data, path, |r| records.push(r))?;
    Ok(Records { records, torn_last_line })
}

/// Read the records of a `requests.jsonl` one line at a time, handing each to `each`: memory
/// holds one line, whatever the number of records. Returns whether the last line was cut off
/// mid-write (left out); any other line that is not a record is refused with its number, as
/// is a record whose offsets no run can have ([`RequestRecord::check_offsets`]).
pub fn stream_records(
    reader: impl std::io::BufRead,
    path: &Path,
    each: impl FnMut(RequestRecord),
) -> Result<bool, ReportError> {
    let bad = |line: usize, reason: String| ReportError::Parse {
        path: path.display().to_string(),
        line,
        reason,
    };
    let part = scan(reader, u64::MAX, each).map_err(|e| match e {
        ScanError::Io(e) => rerr(path)(e),
        ScanError::Line(n, why) => bad(n, why),
    })?;
    Ok(part.pending.is_some())
}

/// What [`scan`] read of a part of a file: its lines, and its last line when that was not
/// a record (its number and why).
struct Part {
    lines: usize,
    pending: Option<(usize, String)>,
}

enum ScanError {
    Io(std::io::Error),
    /// A line (numbered from the part's first) refused.
    Line(usize, String),
}

/// The lines of `reader` that start before byte `limit`, each record to `each`. A line that
/// is not a record is refused once another line follows it in the part.
fn scan(
    mut reader: impl std::io::BufRead,
    limit: u64,
    mut each: impl FnMut(RequestRecord),
) -> Result<Part, ScanError> {
    let mut pending: Option<(usize, String)> = None;
    let (mut at, mut lines) = (0u64, 0usize);
    let mut buf = Vec::with_capacity(4096);
    while at < limit {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(ScanError::Io)?;
        if n == 0 {
            break;
        }
        at += n as u64;
        lines += 1;
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if let Some((n, e)) = pending.take() {
            return Err(ScanError::Line(n, e));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // UTF-8 checked once for the line (an ASCII fast path), then read as text
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8 text: {e}"))
            .and_then(|t| serde_json::from_str::<RequestRecord>(t).map_err(|e| e.to_string()));
        match parsed {
            Ok(r) => {
                if let Err((field, why)) = r.check_offsets() {
                    return Err(ScanError::Line(lines, format!("field {field}: {why}")));
                }
                each(r);
            }
            Err(e) => pending = Some((lines, format!("not a request record: {e}"))),
        }
    }
    Ok(Part { lines, pending })
}

/// Bytes of requests.jsonl per part of [`RunDir::fold_records`], and the most parts: a
/// file's parts depend on its size alone, so a fold gives the same result on any machine.
const FOLD_PART_BYTES: u64 = 128 << 20;
const FOLD_MAX_PARTS: u64 = 8;

impl RunDir {
    /// Fold `requests.jsonl` into accumulators, its parts (by size: up to 8 of at least
    /// 128 MiB) on as many threads as the machine has cores, each part into its own
    /// accumulator from `init`; returns them in file order, and whether the last line was cut
    /// off mid-write. Errors name the line in the whole file, as [`stream_records`] does.
    pub fn fold_records<A: Send>(
        &self,
        init: impl Fn() -> A + Sync,
        fold: impl Fn(&mut A, RequestRecord) + Sync,
    ) -> Result<(Vec<A>, bool), ReportError> {
        self.fold_in_parts(FOLD_PART_BYTES, init, fold)
    }

    fn fold_in_parts<A: Send>(
        &self,
        part_bytes: u64,
        init: impl Fn() -> A + Sync,
        fold: impl Fn(&mut A, RequestRecord) + Sync,
    ) -> Result<(Vec<A>, bool), ReportError> {
        let p = self.file(files::REQUESTS);
        let size = fs::metadata(&p).map_err(rerr(&p))?.len();
        let parts = size.div_ceil(part_bytes.max(1)).clamp(1, FOLD_MAX_PARTS);
        let bounds: Vec<(u64, u64)> =
            (0..parts).map(|i| (size * i / parts, size * (i + 1) / parts)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let threads = cores.min(parts as usize);
        let read_part = |(start, end): (u64, u64)| -> Result<(A, Part), ScanError> {
            use std::io::{BufRead as _, Seek as _};
            let f = fs::File::open(&p).map_err(ScanError::Io)?;
            let mut r = std::io::BufReader::with_capacity(1 << 16, f);
            let mut begin = start;
            if start > 0 {
                // the line under way at `start` belongs to the part before
                r.seek(std::io::SeekFrom::Start(start - 1)).map_err(ScanError::Io)?;
                let mut skip = Vec::new();
                begin += r.read_until(b'\n', &mut skip).map_err(ScanError::Io)? as u64 - 1;
            }
            let mut acc = init();
            let part = scan(r, end.saturating_sub(begin), |rec| fold(&mut acc, rec))?;
            Ok((acc, part))
        };
        let mut done: Vec<Option<Result<(A, Part), ScanError>>> =
            (0..parts).map(|_| None).collect();
        std::thread::scope(|sc| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    sc.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&b) = bounds.get(i) else { break };
                            mine.push((i, read_part(b)));
                        }
                        mine
                    })
                })
                .collect();
            for w in workers {
                for (i, r) in w.join().unwrap_or_default() {
                    done[i] = Some(r);
                }
            }
        });
        join_parts(&p, done)
    }
}

/// The parts of [`RunDir::fold_records`] in order, their lines numbered in the file.
fn join_parts<A>(
    p: &Path,
    done: Vec<Option<Result<(A, Part), ScanError>>>,
) -> Result<(Vec<A>, bool), ReportError> {
    let bad = |line: usize, reason: String| ReportError::Parse {
        path: p.display().to_string(),
        line,
        reason,
    };
    let (mut accs, mut before) = (Vec::new(), 0usize);
    let mut pending: Option<(usize, String)> = None;
    for d in done {
        let (acc, part) = match d {
            Some(Ok(x)) => x,
            Some(Err(ScanError::Io(e))) => return Err(rerr(p)(e)),
            Some(Err(ScanError::Line(n, why))) => return Err(bad(before + n, why)),
            None => {
                return Err(ReportError::Invalid(format!("{}: a part was not read", p.display())))
            }
        };
        // a part's last line that was no record is refused once a line follows it
        if part.lines > 0 {
            if let Some((n, why)) = pending.take() {
                return Err(bad(n, why));
            }
        }
        if let Some((n, why)) = part.pending {
            pending = Some((before + n, why));
        }
        before += part.lines;
        accs.push(acc);
    }
    Ok((accs, pending.is_some()))
}

#[cfg(test)]
mod fold_tests {
    use super::*;

    /// A file cut into parts anywhere gives every record once, in order; a torn last line
    /// and a bad line are found as one pass finds them, with the same line number.
    #[test]
    fn parts_cut_anywhere_read_every_record_once_in_order() {
        let fx =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/records/sim_faults.jsonl");
        let one = parse_records(&fs::read(fx).unwrap(), Path::new("r")).unwrap().records;
        let d = std::env::temp_dir().join(format!("quetta-fold-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let mut text = String::new();
        for i in 0..45u64 {
            let mut r = one[(i % one.len() as u64) as usize].clone();
            r.id = i;
            text.push_str(&serde_json::to_string(&r).unwrap());
            text.push_str(if i % 7 == 3 { "\n\n" } else { "\n" });
        }
        let run = RunDir::open(&d).unwrap();
        let ids = |part_bytes: u64| {
            let (parts, torn) = run
                .fold_in_parts(part_bytes, Vec::new, |v: &mut Vec<u64>, r| v.push(r.id))
                .unwrap();
            (parts.into_iter().flatten().collect::<Vec<u64>>(), torn)
        };
        let size = text.len() as u64;
        fs::write(d.join(files::REQUESTS), &text).unwrap();
        for part_bytes in (1..size / 7).step_by(97).chain([size / 8, size / 3, size]) {
            assert_eq!(ids(part_bytes), ((0..45).collect(), false), "parts of {part_bytes} bytes");
        }
        let torn = format!("{text}{{\"id\":45,\"intended_off");
        fs::write(d.join(files::REQUESTS), &torn).unwrap();
        for part_bytes in [1, 500, size / 5] {
            assert_eq!(ids(part_bytes), ((0..45).collect(), true), "torn, parts of {part_bytes}");
        }
        let mut lines: Vec<&str> = text.split('\n').collect();
        lines[20] = "{\"id\": not a record}";
        fs::write(d.join(files::REQUESTS), lines.join("\n")).unwrap();
        let one_pass = run.for_each_record(|_| {}).unwrap_err().to_string();
        assert!(one_pass.contains(":21: not a request record"), "{one_pass}");
        for part_bytes in [1, 300, 2000, size / 3] {
            let e = run.fold_in_parts(part_bytes, || (), |(), _| {}).unwrap_err().to_string();
            assert_eq!(e, one_pass, "parts of {part_bytes}");
        }
        let _ = fs::remove_dir_all(&d);
    }
}
