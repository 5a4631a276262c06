//! A benchmark as one shard of a run split across processes ([`Sharding`]): its slice of the
//! plan (`quetta_loadgen::Shard`), and, with a coordinator, the rendezvous at shard 0
//! (`quetta_shard`): every shard joins, meets the common start after its warmup and sends
//! its records to shard 0 as they are made; shard 0 merges them into the run directory
//! (`quetta_report::merge`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quetta_loadgen::{BeforeMeasured, RecordSink, RunConfig, RunControl, Shard};
use quetta_metrics::RequestRecord;
use quetta_report::{MergeOptions, RunSettings, ShardRun, Summary};
pub use quetta_shard::ShardSecret;
use quetta_shard::{Coordinator, CoordinatorConfig, Member, RecordSender, ShardEnd, Started};

use quetta_engine::setting::Setting;
use quetta_shard::ShardError;

use crate::{Error, Result};

/// Which part of a split run this benchmark is, and where the shards meet.
#[derive(Debug, Clone, PartialEq)]
pub struct Sharding {
    pub shard: Shard,
    /// Shard 0's HOST:PORT. Without it a shard runs its slice alone (no common start), and
    /// `quetta-bench merge` puts the shards' directories together afterwards.
    pub coordinator: Option<String>,
    /// What shard 0 listens on (default: every interface, the coordinator's port).
    pub bind: Option<SocketAddr>,
    /// How long the shards wait for each other to join.
    pub timeout: Duration,
    /// The secret every shard is given: shard 0 refuses a connection without it (and the
    /// merged run's notes list each refusal). `None`: any process that reaches shard 0 and
    /// knows the plan may join.
    pub secret: Option<ShardSecret>,
}

impl Sharding {
    /// Shard `shard`, running alone.
    pub fn alone(shard: Shard) -> Self {
        Self {
            shard,
            coordinator: None,
            bind: None,
            timeout: Duration::from_secs(120),
            secret: None,
        }
    }
}

/// The settings' fingerprint: shards started with other flags have another one.
pub(crate) fn fingerprint(settings: &RunSettings) -> String {
    let text = serde_json::to_string(settings).unwrap_or_default();
    // FNV-1a, 64 bits: a check of sameness, not of integrity
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn ns(t: SystemTime) -> Option<i64> {
    t.duration_since(UNIX_EPOCH).ok().and_then(|d| i64::try_from(d.as_nanos()).ok())
}

/// This shard's place, before the run (its clock once it has met shard 0).
pub(crate) fn shard_run(s: &Sharding, cfg: &RunConfig, member: Option<&Member>) -> ShardRun {
    let clock = member.map(Member::clock);
    ShardRun {
        index: s.shard.index(),
        count: s.shard.count(),
        coordinator: s.coordinator.clone(),
        planned: cfg.shard_planned().ok().flatten(),
        clock_offset_ms: clock.map(|c| c.offset_ns as f64 / 1e6),
        clock_rtt_ms: clock.map(|c| c.rtt_ns as f64 / 1e6),
        ..ShardRun::default()
    }
}

/// The start as this shard met it, into its summary: the skew is that of the measured
/// phase's own start (`started_at`, taken with its monotonic origin), on shard 0's clock.
pub(crate) fn record_start(run: &mut ShardRun, started_at: SystemTime, met: Option<Started>) {
    run.started_unix_ns = ns(started_at);
    if let (Some(m), Some(s)) = (met, run.started_unix_ns) {
        let offset_ns = (run.clock_offset_ms.unwrap_or(0.0) * 1e6).round() as i64;
        run.start_unix_ns = Some(m.at_unix_ns);
        run.start_skew_ms = Some((s + offset_ns - m.at_unix_ns) as f64 / 1e6);
    }
}

/// Where shard `k` (not 0) that met shard 0 keeps its own copy of its run under the output
/// directory `out`: `out/local/shard-K` (apart from `out/shard-K`, which shard 0 writes when
/// `out` is a volume every shard shares).
pub(crate) fn local_dir(out: &Path, k: u32) -> PathBuf {
    out.join("local").join(format!("shard-{k}"))
}

/// Every record to each sink, in order; the first error is the write's.
pub(crate) struct Tee(pub(crate) Vec<Box<dyn RecordSink>>);

impl RecordSink for Tee {
    fn write(&mut self, rec: &RequestRecord) -> std::io::Result<()> {
        let mut first = Ok(());
        for s in &mut self.0 {
            let r = s.write(rec);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let mut first = Ok(());
        for s in &mut self.0 {
            let r = s.flush();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// Records to shard 0 as the recorder writes them.
struct ForwardSink(RecordSender);

impl RecordSink for ForwardSink {
    fn write(&mut self, rec: &RequestRecord) -> std::io::Result<()> {
        let line = serde_json::to_string(rec).map_err(std::io::Error::other)?;
        if self.0.send(line) {
            Ok(())
        } else {
            Err(std::io::Error::other("the connection to shard 0 is closed"))
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A shard met at its coordinator: its member connection (and shard 0's coordinator).
pub(crate) struct Joined {
    member: Arc<tokio::sync::Mutex<Option<Member>>>,
    started: Arc<Mutex<Option<Started>>>,
    coordinator: Option<(Coordinator, PathBuf)>,
    /// Why shard 0 stopped this shard, once it has.
    stopped_by: tokio::sync::watch::Receiver<Option<String>>,
    /// The tasks that carry a stop across the shards (ended with this value).
    relays: Vec<AbortOnDrop>,
}

/// A task that ends when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn shard_err(e: quetta_shard::ShardError) -> Error {
    Error::Shard(e)
}

impl Joined {
    /// Join shard 0 at `addr` (shard 0 starts the coordinator first, writing into `out`).
    pub(crate) async fn join(
        s: &Sharding,
        addr: &str,
        settings: &RunSettings,
        out: Option<&Path>,
    ) -> Result<Joined> {
        let fp = fingerprint(settings);
        let (k, n) = (s.shard.index(), s.shard.count());
        let mut coordinator = None;
        let mut target = addr.to_owned();
        if k == 0 {
            let out = out.ok_or_else(|| {
                Error::missing(
                    Setting::OutputDir,
                    "shard 0 writes the merged run: give it an output directory",
                )
            })?;
            let port = addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).ok_or_else(
                || {
                    Error::invalid(
                        quetta_engine::setting::Setting::Coordinator,
                        format!("{addr}: give HOST:PORT"),
                    )
                },
            )?;
            let bind = s.bind.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], port)));
            let c = Coordinator::start(CoordinatorConfig {
                bind,
                count: n,
                fingerprint: fp.clone(),
                join_timeout: s.timeout,
                out: out.to_path_buf(),
                secret: s.secret.clone(),
            })
            .await
            .map_err(shard_err)?;
            target = format!("127.0.0.1:{}", c.local_addr().port());
            coordinator = Some((c, out.to_path_buf()));
        }
        let m = Member::join(&target, k, n, &fp, s.secret.as_ref(), s.timeout)
            .await
            .map_err(shard_err)?;
        Ok(Joined {
            stopped_by: m.stop_signal(),
            member: Arc::new(tokio::sync::Mutex::new(Some(m))),
            started: Arc::default(),
            coordinator,
            relays: Vec::new(),
        })
    }

    /// Carry a stop across the shards: shard 0 stopped (Ctrl-C) stops every shard; a shard
    /// told by shard 0 to stop stops its own run, which drains and is marked partial.
    pub(crate) fn relay_stop(&mut self, control: &Arc<RunControl>) {
        if let Some((c, _)) = &self.coordinator {
            let (stopper, control) = (c.stopper(), control.clone());
            self.relays.push(AbortOnDrop(tokio::spawn(async move {
                control.wait_stopped().await;
                stopper.stop_all(
                    "shard 0 was stopped: every shard stops and marks its results partial",
                );
            })));
        }
        let (mut told, control) = (self.stopped_by.clone(), control.clone());
        self.relays.push(AbortOnDrop(tokio::spawn(async move {
            if told.wait_for(Option::is_some).await.is_ok() {
                control.stop();
            }
        })));
    }

    /// Why shard 0 stopped this shard, if it did (shard 0 itself was stopped, not by it).
    pub(crate) fn stopped_by(&self) -> Option<String> {
        self.stopped_by.borrow().clone().filter(|_| self.coordinator.is_none())
    }

    pub(crate) fn clock_of(&self) -> Option<quetta_shard::ClockSync> {
        self.member.try_lock().ok().and_then(|g| g.as_ref().map(Member::clock))
    }

    /// Send a file of the run to shard 0.
    pub(crate) async fn file(&self, name: &str, text: String) -> Result<()> {
        match self.member.lock().await.as_ref() {
            Some(m) => m.file(name, text).map_err(shard_err),
            None => {
                Err(Error::Shard(ShardError::Aborted("this shard's connection is closed".into())))
            }
        }
    }

    pub(crate) async fn sink(&self) -> Option<Box<dyn RecordSink>> {
        let g = self.member.lock().await;
        g.as_ref().map(|m| Box::new(ForwardSink(m.records())) as Box<dyn RecordSink>)
    }

    /// The hook before the measured phase: `prev` (a cache reset), then ready and the
    /// common start.
    pub(crate) fn hook(
        &self,
        prev: Option<BeforeMeasured>,
        planned: Option<u64>,
    ) -> BeforeMeasured {
        let (member, started) = (self.member.clone(), self.started.clone());
        BeforeMeasured(Arc::new(move || {
            let (member, started, prev) = (member.clone(), started.clone(), prev.clone());
            Box::pin(async move {
                if let Some(h) = prev {
                    (h.0)().await?;
                }
                let mut g = member.lock().await;
                let m = g.as_mut().ok_or("the shard's connection is gone")?;
                let st =
                    m.ready_and_start(planned).await.map_err(|e| format!("sharded run: {e}"))?;
                *started.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(st);
                Ok(())
            })
        }))
    }

    pub(crate) fn started(&self) -> Option<Started> {
        *self.started.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// End this shard's part (its summary and series sent); at shard 0, wait for the others
    /// and merge: the merged summary.
    pub(crate) async fn finish(
        self,
        summary: &Summary,
        series_text: String,
        grace: Duration,
        overwrite: bool,
    ) -> Result<Option<Summary>> {
        let text = serde_json::to_string_pretty(summary).map_err(Error::encode("summary.json"))?;
        self.file("timeseries.jsonl", series_text).await?;
        self.file("summary.json", text).await?;
        let m = self.member.lock().await.take();
        if let Some(m) = m {
            m.done().await.map_err(shard_err)?;
        }
        let Some((c, out)) = self.coordinator else { return Ok(None) };
        let refused = c.refused();
        let (_, reports) = c.finish(grace).await;
        let mut opts = MergeOptions { overwrite, ..MergeOptions::default() };
        if !refused.is_empty() {
            opts.notes.push(quetta_report::Note::ShardsRefused(refused));
        }
        let mut dirs = Vec::new();
        for r in &reports {
            if let ShardEnd::Died { reason } = &r.end {
                opts.ended_early.insert(r.index, reason.clone());
            }
            if let Some(k) = r.skew_ns {
                opts.start_skew_ms.insert(r.index, k as f64 / 1e6);
            }
            if r.dir.join(quetta_report::files::MANIFEST).is_file() {
                dirs.push(r.dir.clone());
            }
        }
        let merged = quetta_report::merge(&dirs, &out, &opts)?;
        Ok(Some(merged))
    }
}
