//! One run from many: the run directories of the shards of a sharded run (`--shard K/N`)
//! merged into a normal run directory that `report`, `compare` and `export` read like any
//! other.
//!
//! The merge is exact: the records of every shard, moved onto one clock, are streamed into
//! the merged `requests.jsonl` and folded into one aggregate, so every count, token total
//! and percentile is the one a single run over the same records gives. A shard that kept no
//! records contributes its summary's HdrHistograms (merged; counts add exactly, percentiles
//! come from the merged histogram as they would for one run). Memory holds one record at a
//! time, the histograms and the series.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use quetta_metrics::series::SeriesBuilder;
use quetta_metrics::{Aggregate, ClientStats, SloSet};

use crate::dir::{werr, ReportError, RunDir, RunManifest};
use crate::note::Note;
use crate::summary::{SessionsSummary, ShardResult, ShardRun, ShardsSummary, Summary};

/// What the caller knows beyond the directories (shard 0, from the rendezvous).
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    pub overwrite: bool,
    /// Why a shard ended early, by index (a dead connection, a shard that went silent).
    pub ended_early: BTreeMap<u32, String>,
    /// Notes to add to the merged summary.
    pub notes: Vec<Note>,
    /// Each shard's start skew in ms as shard 0 heard it, by index: for a shard that died
    /// before writing the summary that holds its own.
    pub start_skew_ms: BTreeMap<u32, f64>,
}

/// One shard's directory, read.
struct Part {
    dir: PathBuf,
    manifest: RunManifest,
    summary: Option<Summary>,
    shard: ShardRun,
}

impl Part {
    fn read(dir: &Path) -> Result<Part, ReportError> {
        let d = RunDir::open(dir)?;
        let manifest = d.read_manifest().map_err(|e| {
            ReportError::Invalid(format!("{}: not a run directory (run.json: {e})", dir.display()))
        })?;
        let summary = if d.has_summary() { Some(d.read_summary()?) } else { None };
        let shard = summary
            .as_ref()
            .and_then(|s| s.shard.clone())
            .or_else(|| manifest.shard.clone())
            .unwrap_or_default();
        Ok(Part { dir: dir.to_path_buf(), manifest, summary, shard })
    }

    /// Its measured phase's start on shard 0's clock, ns since the epoch: from its own
    /// summary, else the common start and the skew shard 0 heard.
    fn start_ns(&self) -> Option<i64> {
        let offset = self.shard.clock_offset_ms.unwrap_or(0.0);
        match self.shard.started_unix_ns {
            Some(s) => Some(s + (offset * 1e6).round() as i64),
            None => {
                Some(self.shard.start_unix_ns? + (self.shard.start_skew_ms? * 1e6).round() as i64)
            }
        }
    }
}

/// Refuse shards that are not of one plan: counts that differ, an index twice, settings
/// that differ (naming the fields).
fn check(parts: &[Part]) -> Result<(), ReportError> {
    let first = &parts[0];
    let bad = |m: String| Err(ReportError::Invalid(m));
    let mut seen = BTreeMap::new();
    for p in parts {
        if p.shard.count != first.shard.count {
            return bad(format!(
                "{} is shard {} of {}, {} of {}: merge the shards of one run",
                p.dir.display(),
                p.shard.index,
                p.shard.count,
                first.dir.display(),
                first.shard.count
            ));
        }
        if let Some(other) = seen.insert(p.shard.index, &p.dir) {
            return bad(format!(
                "{} and {} are both shard {}",
                other.display(),
                p.dir.display(),
                p.shard.index
            ));
        }
        let (a, b) = (
            serde_json::to_value(&first.manifest.config).unwrap_or_default(),
            serde_json::to_value(&p.manifest.config).unwrap_or_default(),
        );
        if a != b {
            let keys: Vec<String> = match (a.as_object(), b.as_object()) {
                (Some(a), Some(b)) => {
                    a.keys().filter(|k| a.get(*k) != b.get(*k)).cloned().collect()
                }
                _ => vec![],
            };
            return bad(format!(
                "{} was run with other settings than {} ({}): merge the shards of one plan",
                p.dir.display(),
                first.dir.display(),
                keys.join(", ")
            ));
        }
    }
    Ok(())
}

/// Merge the run directories `dirs` (the shards of one run) into `out`.
pub fn merge(dirs: &[PathBuf], out: &Path, opts: &MergeOptions) -> Result<Summary, ReportError> {
    if dirs.is_empty() {
        return Err(ReportError::Invalid("give the run directories of the shards to merge".into()));
    }
    let mut parts = dirs.iter().map(|d| Part::read(d)).collect::<Result<Vec<_>, _>>()?;
    let independent = parts.iter().all(|p| p.shard.count == 0);
    if independent {
        // plain runs, not shards: added up in the order given
        let n = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        for (k, p) in parts.iter_mut().enumerate() {
            p.shard.index = u32::try_from(k).unwrap_or(u32::MAX);
            p.shard.count = n;
        }
    }
    check(&parts)?;
    parts.sort_by_key(|p| p.shard.index);
    let common = parts.iter().find_map(|p| p.shard.start_unix_ns);
    for p in &mut parts {
        if p.shard.start_skew_ms.is_none() {
            p.shard.start_skew_ms = opts.start_skew_ms.get(&p.shard.index).copied();
        }
        p.shard.start_unix_ns = p.shard.start_unix_ns.or(common);
    }
    let base = parts.iter().map(Part::start_ns).collect::<Option<Vec<_>>>();
    let base_ns = base.as_ref().and_then(|v| v.iter().min().copied());
    let first = &parts[0].manifest;
    let slos: Option<SloSet> = match first.slo.as_deref() {
        Some(s) => {
            Some(s.parse().map_err(|e| ReportError::Invalid(format!("run.json: slo: {e}")))?)
        }
        None => None,
    };
    let dir = RunDir::create(out, opts.overwrite)?;
    let mut manifest = first.clone();
    manifest.shard = None;
    manifest.started_at = earliest(&parts);
    dir.write_manifest(&manifest)?;
    let mut fold = Fold::new(slos);
    let path = dir.file(crate::files::REQUESTS);
    let mut w =
        std::io::BufWriter::with_capacity(1 << 16, fs::File::create(&path).map_err(werr(&path))?);
    let mut results = Vec::new();
    let mut notes = opts.notes.clone();
    for p in &parts {
        let shift_ms = match (p.start_ns(), base_ns) {
            (Some(s), Some(b)) => (s - b) as f64 / 1e6,
            _ => 0.0,
        };
        let counted = fold.part(p, shift_ms, &mut w, &path, &mut notes)?;
        results.push(result_of(p, counted, opts));
    }
    w.flush().map_err(werr(&path))?;
    if base_ns.is_none() && parts.len() > 1 {
        notes.push(Note::ShardStartsUnknown);
    }
    if independent {
        notes.push(Note::NotOnePlan { runs: parts.len() });
    }
    let s = fold.finish(&dir, &parts, results, base_ns, notes)?;
    Ok(s)
}

/// The earliest `started_at` of the parts (RFC 3339 strings sort as times).
fn earliest(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| p.summary.as_ref().map_or(&p.manifest.started_at, |s| &s.started_at))
        .min()
        .cloned()
        .unwrap_or_default()
}

fn result_of(p: &Part, counted: (u64, u64), opts: &MergeOptions) -> ShardResult {
    let early = opts.ended_early.get(&p.shard.index).cloned();
    let (status, reason) = match (&p.summary, early) {
        (_, Some(r)) => ("died", Some(r)),
        (Some(s), None) if s.partial => ("partial", s.notes.first().map(ToString::to_string)),
        (Some(_), None) => ("finished", None),
        (None, None) => (
            "died",
            Some(
                "it wrote no summary.json (the process died or was killed); its records are kept"
                    .into(),
            ),
        ),
    };
    ShardResult {
        index: p.shard.index,
        status: status.into(),
        reason,
        planned: p.shard.planned.or_else(|| p.summary.as_ref().and_then(|s| s.planned)),
        completed: counted.0,
        failed: counted.1,
        clock_offset_ms: p.shard.clock_offset_ms,
        clock_rtt_ms: p.shard.clock_rtt_ms,
        start_skew_ms: p.shard.start_skew_ms,
        client: p.summary.as_ref().map(|s| s.client.clone()),
    }
}

/// The merged aggregate and series as the parts stream through.
struct Fold {
    agg: Aggregate,
    series: SeriesBuilder,
    sent: u64,
    first_sent: Option<f64>,
    last_sent: Option<f64>,
}

impl Fold {
    fn new(slos: Option<SloSet>) -> Self {
        Self {
            agg: Aggregate::new(slos),
            series: SeriesBuilder::default(),
            sent: 0,
            first_sent: None,
            last_sent: None,
        }
    }

    /// Stream one part's records (moved `shift_ms` later) into the merged file and the
    /// aggregate; a part without records gives its histograms. Its (completed, failed).
    fn part(
        &mut self,
        p: &Part,
        shift_ms: f64,
        w: &mut impl Write,
        path: &Path,
        notes: &mut Vec<Note>,
    ) -> Result<(u64, u64), ReportError> {
        let d = RunDir::open(&p.dir)?;
        let (mut ok, mut failed) = (0u64, 0u64);
        if !d.file(crate::files::REQUESTS).is_file() {
            let Some(s) = &p.summary else {
                notes.push(Note::ShardEmpty { index: p.shard.index });
                return Ok((0, 0));
            };
            self.agg.merge(&s.aggregate);
            self.sent += s.sent;
            notes.push(Note::ShardWithoutRecords { index: p.shard.index });
            return Ok((s.aggregate.completed, s.aggregate.failed));
        }
        let mut err = None;
        let torn = d.for_each_record(|mut r| {
            if err.is_some() {
                return;
            }
            r.shift_offsets(shift_ms);
            if let Some(t) = r.sent_offset_ms {
                self.sent += 1;
                self.first_sent = Some(self.first_sent.map_or(t, |f| f.min(t)));
                self.last_sent = Some(self.last_sent.map_or(t, |l| l.max(t)));
            }
            if r.error_kind.is_none() {
                ok += 1;
            } else {
                failed += 1;
            }
            self.agg.add(&r);
            self.series.add(&r);
            let line = serde_json::to_vec(&r).map_err(|e| ReportError::Invalid(e.to_string()));
            err = line
                .and_then(|mut l| {
                    l.push(b'\n');
                    w.write_all(&l).map_err(werr(path))
                })
                .err();
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        if torn {
            notes.push(Note::ShardTornRecord { index: p.shard.index });
        }
        Ok((ok, failed))
    }

    fn finish(
        self,
        dir: &RunDir,
        parts: &[Part],
        shards: Vec<ShardResult>,
        base_ns: Option<i64>,
        mut notes: Vec<Note>,
    ) -> Result<Summary, ReportError> {
        let m = &parts[0].manifest;
        let metrics = self.agg.summary(&m.percentiles);
        let slos = self.agg.slos.clone();
        let second = self.series.finish();
        dir.write_series(&second)?;
        let sums = |f: fn(&Summary) -> u64| {
            parts.iter().filter_map(|p| p.summary.as_ref()).map(f).sum::<u64>()
        };
        let planned: Option<u64> = shards.iter().map(|s| s.planned).sum();
        let missing = shards.len() < parts[0].shard.count as usize;
        if missing {
            let have: Vec<u32> = shards.iter().map(|s| s.index).collect();
            let count = parts[0].shard.count;
            let missing = (0..count).filter(|k| !have.contains(k)).collect();
            notes.insert(0, Note::ShardsMissing { missing, count });
        }
        let died: Vec<&ShardResult> = shards.iter().filter(|s| s.status == "died").collect();
        for d in &died {
            let reason = d.reason.clone().unwrap_or_default();
            let (index, completed, failed, planned) = (d.index, d.completed, d.failed, d.planned);
            notes.insert(0, Note::ShardDied { index, completed, failed, planned, reason });
        }
        let partial = missing || !died.is_empty() || shards.iter().any(|s| s.status == "partial");
        notes.push(Note::Merged { shards: shards.len() });
        let abs_max = |f: fn(&ShardResult) -> Option<f64>| {
            shards
                .iter()
                .map(f)
                .collect::<Option<Vec<f64>>>()
                .map(|v| v.iter().fold(0.0f64, |a, b| a.max(b.abs())))
        };
        let sessions =
            parts.iter().filter_map(|p| p.summary.as_ref()?.sessions.clone()).reduce(|a, b| {
                SessionsSummary {
                    started: a.started + b.started,
                    completed: a.completed + b.completed,
                    failed: a.failed + b.failed,
                    truncated: a.truncated + b.truncated,
                }
            });
        let tool = crate::Tool::new(m.tool.clone(), m.tool_version.clone());
        let (config, target) = (m.config.clone(), m.target.clone());
        let mut s = Summary::new(&tool, earliest(parts), config, target, metrics, self.agg);
        s.partial = partial;
        s.partial_reason = if missing || !died.is_empty() {
            Some(crate::PartialReason::Shards)
        } else {
            // shards cut short alike say so (Ctrl-C on shard 0: shard 0 stopped, the others
            // stopped by it); otherwise, shards
            parts.iter().filter_map(|p| p.summary.as_ref()?.partial_reason).reduce(|a, b| {
                use crate::PartialReason as R;
                match (a, b) {
                    _ if a == b => a,
                    (R::Stopped | R::StoppedByShard0, R::Stopped | R::StoppedByShard0) => {
                        R::Stopped
                    }
                    _ => R::Shards,
                }
            })
        }
        .filter(|_| partial);
        s.planned = planned.or(m.config.num_requests);
        s.sent = self.sent;
        s.warmup_completed = sums(|s| s.warmup_completed);
        s.warmup_failed = sums(|s| s.warmup_failed);
        s.achieved_send_rate =
            quetta_metrics::rates::send_rate(self.sent, self.first_sent, self.last_sent)
                .map(|r| (r * 1e3).round() / 1e3);
        s.cancelled_in_drain = sums(|s| s.cancelled_in_drain);
        s.client = total_client(parts);
        s.notes = notes;
        s.workload_error = parts.iter().find_map(|p| {
            let e = p.summary.as_ref()?.workload_error.as_ref()?;
            Some(format!("shard {}: {e}", p.shard.index))
        });
        s.sessions = sessions;
        s.steady_state = self.series.steadiness(&second);
        if let Some(st) = &s.steady_state {
            s.steady = dir.steady(st, slos.as_ref(), &m.percentiles)?;
        }
        s.shards = Some(ShardsSummary {
            count: parts[0].shard.count,
            start_unix_ns: parts.iter().find_map(|p| p.shard.start_unix_ns).or(base_ns),
            max_start_skew_ms: abs_max(|s| s.start_skew_ms),
            max_clock_offset_ms: abs_max(|s| s.clock_offset_ms),
            shards,
        });
        dir.write_summary(&s)?;
        Ok(s)
    }
}

/// The shards' own CPU and memory added up (those that wrote a summary).
fn total_client(parts: &[Part]) -> ClientStats {
    let mut t = ClientStats::default();
    let mut scopes = Vec::new();
    for c in parts.iter().filter_map(|p| p.summary.as_ref().map(|s| &s.client)) {
        t.cpu_user_s += c.cpu_user_s;
        t.cpu_system_s += c.cpu_system_s;
        t.process_cpu_user_s += c.process_cpu_user_s;
        t.process_cpu_system_s += c.process_cpu_system_s;
        t.peak_rss_kib += c.peak_rss_kib;
        t.worker_threads += c.worker_threads;
        scopes.push(c.peak_rss_scope.clone());
    }
    scopes.dedup();
    t.peak_rss_scope = match scopes.as_slice() {
        [one] => one.clone(),
        _ => "unknown".into(),
    };
    t
}
