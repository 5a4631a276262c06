//! Shard 0's side: the meeting point, the start, and the files of every shard.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::wire::{recv, send, Down, Up};
use crate::{start_lead, unix_ns, ClockSync, ShardError, ShardSecret};

/// Where shard 0 listens and what it expects.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// The address to listen on (`0.0.0.0:PORT`: every interface).
    pub bind: SocketAddr,
    pub count: u32,
    /// The plan's fingerprint every shard must bring.
    pub fingerprint: String,
    /// How long to wait for all shards to join.
    pub join_timeout: Duration,
    /// Where shard K's files go: `out/shard-K/`.
    pub out: PathBuf,
    /// The secret a member must bring (`None`: any member that knows the plan may join).
    pub secret: Option<ShardSecret>,
}

/// How a shard's part ended, as shard 0 saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardEnd {
    /// It sent `Done` after its records.
    Finished,
    /// Its connection ended (or went silent) before `Done`: what it sent is kept.
    Died { reason: String },
    /// It never joined.
    NeverJoined,
}

/// One shard as shard 0 saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardReport {
    pub index: u32,
    pub end: ShardEnd,
    pub clock: Option<ClockSync>,
    /// The measured requests it planned (from its `Ready`; `None`: unknown).
    pub planned: Option<u64>,
    pub skew_ns: Option<i64>,
    /// Records received from it.
    pub records: u64,
    /// `out/shard-K`.
    pub dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    Joining,
    Joined,
    Start(i64),
    Abort(String),
}

struct State {
    cfg: CoordinatorConfig,
    reports: BTreeMap<u32, ShardReport>,
    ready: usize,
    max_rtt: u64,
    /// Shards whose connection has ended (their `end` is final).
    ended: std::collections::BTreeSet<u32>,
    /// Connections refused before they joined: the peer's address and why.
    refused: Vec<String>,
    /// Why every shard is to stop (set once, after the start).
    stop: watch::Sender<Option<String>>,
    phase: watch::Sender<Phase>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Shard 0's rendezvous, listening.
pub struct Coordinator {
    addr: SocketAddr,
    state: Shared,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Coordinator {
    /// Listen on `cfg.bind` and wait for the shards (in the background).
    pub async fn start(cfg: CoordinatorConfig) -> Result<Coordinator, ShardError> {
        let listener = TcpListener::bind(cfg.bind).await.map_err(|e| {
            ShardError::Connect(format!("shard 0 cannot listen on {}: {e}", cfg.bind))
        })?;
        let addr = listener.local_addr().map_err(|e| ShardError::Connect(e.to_string()))?;
        fs::create_dir_all(&cfg.out)
            .map_err(|e| ShardError::Io(format!("{}: {e}", cfg.out.display())))?;
        let (phase, _) = watch::channel(Phase::Joining);
        let timeout = cfg.join_timeout;
        let state = Arc::new(Mutex::new(State {
            cfg,
            reports: BTreeMap::new(),
            ready: 0,
            max_rtt: 0,
            ended: std::collections::BTreeSet::new(),
            refused: Vec::new(),
            stop: watch::channel(None).0,
            phase,
        }));
        let s2 = state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let st = lock(&s2);
            if *st.phase.borrow() == Phase::Joining {
                let missing: Vec<String> = (0..st.cfg.count)
                    .filter(|k| st.reports.get(k).is_none_or(|r| r.clock.is_none()))
                    .map(|k| k.to_string())
                    .collect();
                let refused = match st.refused.len() {
                    0 => String::new(),
                    n => format!("; it refused {n}: {}", st.refused.join("; ")),
                };
                let reason = format!(
                    "shard{} {} of {} never joined within {:.0} s (shard 0 waited at {}{refused})",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", "),
                    st.cfg.count,
                    timeout.as_secs_f64(),
                    st.cfg.bind
                );
                st.phase.send_replace(Phase::Abort(reason));
            }
        });
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        Ok(Coordinator { addr, state, accept })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle that stops every shard (shard 0's Ctrl-C): before the start the rendezvous
    /// is called off; after it each member is told to stop, drains, marks its results
    /// partial and sends them as usual.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.state.clone())
    }

    /// The connections refused before they joined (no shard secret or a wrong one, no
    /// `Hello`): each peer's address and why. Nothing a peer sent is in it.
    pub fn refused(&self) -> Vec<String> {
        lock(&self.state).refused.clone()
    }

    /// Why the rendezvous was called off, if it was.
    pub fn aborted(&self) -> Option<String> {
        match &*lock(&self.state).phase.borrow() {
            Phase::Abort(r) => Some(r.clone()),
            _ => None,
        }
    }

    /// Wait for every shard to end, at most `grace` more; a shard still going then is
    /// reported as died (what it sent is kept). Returns the common start instant (shard 0's
    /// wall clock, ns) and every shard's report, in index order.
    pub async fn finish(self, grace: Duration) -> (Option<i64>, Vec<ShardReport>) {
        let mut accept = self.accept;
        if tokio::time::timeout(grace, &mut accept).await.is_err() {
            accept.abort();
            let _ = accept.await;
            let mut st = lock(&self.state);
            let ended = std::mem::take(&mut st.ended);
            for r in st.reports.values_mut() {
                if !ended.contains(&r.index) {
                    r.end = ShardEnd::Died {
                        reason: format!(
                            "no word from it {:.0} s after shard 0 was done; what it sent is kept",
                            grace.as_secs_f64()
                        ),
                    };
                }
            }
        }
        let st = lock(&self.state);
        let start = match &*st.phase.borrow() {
            Phase::Start(at) => Some(*at),
            _ => None,
        };
        let reports = (0..st.cfg.count)
            .map(|k| {
                st.reports.get(&k).cloned().unwrap_or_else(|| ShardReport {
                    index: k,
                    end: ShardEnd::NeverJoined,
                    clock: None,
                    planned: None,
                    skew_ns: None,
                    records: 0,
                    dir: st.cfg.out.join(format!("shard-{k}")),
                })
            })
            .collect();
        (start, reports)
    }
}

async fn accept_loop(listener: TcpListener, state: Shared) {
    let mut phase = lock(&state).phase.subscribe();
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            a = listener.accept() => {
                if let Ok((s, peer)) = a {
                    let _ = s.set_nodelay(true);
                    conns.spawn(serve(s, peer, state.clone()));
                }
            }
            _ = phase.wait_for(|p| *p != Phase::Joining) => break,
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Stops every shard of a run ([`Coordinator::stopper`]).
#[derive(Clone)]
pub struct Stopper(Shared);

impl std::fmt::Debug for Stopper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stopper")
    }
}

impl Stopper {
    /// Stop every shard, saying `reason`.
    pub fn stop_all(&self, reason: &str) {
        let started = matches!(*lock(&self.0).phase.borrow(), Phase::Start(_));
        if started {
            lock(&self.0).stop.send_replace(Some(reason.to_owned()));
        } else {
            abort(&self.0, reason.to_owned());
        }
    }
}

/// Call the whole run off: every member is told `reason`.
fn abort(state: &Shared, reason: String) {
    let st = lock(state);
    if !matches!(*st.phase.borrow(), Phase::Abort(_)) {
        st.phase.send_replace(Phase::Abort(reason));
    }
}

/// One member's connection, from `Hello` to `Done`.
async fn serve(s: TcpStream, peer: SocketAddr, state: Shared) {
    let (rd, mut w) = s.into_split();
    let mut r = BufReader::with_capacity(1 << 16, rd);
    let mut buf = Vec::new();
    let timeout = lock(&state).cfg.join_timeout;
    let index =
        match tokio::time::timeout(timeout, handshake(&mut r, &mut w, &mut buf, &state)).await {
            Ok(Ok(k)) => k,
            Ok(Err(Refusal::Outsider(why))) => {
                lock(&state).refused.push(format!("{peer}: {why}"));
                let _ = send(&mut w, &Down::Abort { reason: why.into() }).await;
                return;
            }
            Ok(Err(Refusal::Member(reason))) => {
                let _ = send(&mut w, &Down::Abort { reason }).await;
                return;
            }
            Err(_) => {
                lock(&state).refused.push(format!("{peer}: no hello within the join timeout"));
                return;
            }
        };
    // wait for everyone (or the call-off)
    let mut phase = lock(&state).phase.subscribe();
    let p = phase.wait_for(|p| *p != Phase::Joining).await.map(|p| p.clone());
    match p {
        Ok(Phase::Abort(reason)) => {
            let _ = send(&mut w, &Down::Abort { reason }).await;
            return;
        }
        Ok(_) => {
            if send(&mut w, &Down::Joined).await.is_err() {
                abort(&state, format!("shard {index} left before the start"));
                return;
            }
        }
        Err(_) => return,
    }
    let end = run_phase(&mut r, &mut w, &mut buf, &state, index, phase).await;
    let mut st = lock(&state);
    if let Some(rep) = st.reports.get_mut(&index) {
        rep.end = end;
    }
    st.ended.insert(index);
}

/// Why a connection did not join.
enum Refusal {
    /// Not a member of this run (no hello, no secret or a wrong one): refused, and the run
    /// goes on.
    Outsider(&'static str),
    /// A member of this run that cannot join as it is (the run is called off when it says
    /// so), or one that broke off.
    Member(String),
}

/// `Hello`, the checks, `Welcome`, the clock exchange until `Synced`; the shard's index.
async fn handshake(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: &mut OwnedWriteHalf,
    buf: &mut Vec<u8>,
    state: &Shared,
) -> Result<u32, Refusal> {
    let Ok(Some(Up::Hello { index, count, fingerprint, secret })) = recv(r, buf).await else {
        return Err(Refusal::Outsider("a shard must begin with hello"));
    };
    {
        let mut st = lock(state);
        if st.cfg.secret.as_ref().is_some_and(|s| !s.admits(secret.as_ref())) {
            return Err(Refusal::Outsider(if secret.is_some() {
                "a wrong shard secret"
            } else {
                "no shard secret"
            }));
        }
        let why = if count != st.cfg.count {
            Some(format!("shard {index} was started as one of {count} shards, shard 0 as one of {}: give every shard the same shard count", st.cfg.count))
        } else if fingerprint != st.cfg.fingerprint {
            Some(format!("shard {index}'s plan differs from shard 0's (plan {fingerprint} against {}): start every shard with the same run flags", st.cfg.fingerprint))
        } else if index >= count {
            Some(format!("shard {index} does not exist in {count} shards"))
        } else if st.reports.contains_key(&index) {
            Some(format!("two processes joined as shard {index}"))
        } else {
            None
        };
        if let Some(reason) = why {
            drop(st);
            abort(state, reason.clone());
            return Err(Refusal::Member(reason));
        }
        let dir = st.cfg.out.join(format!("shard-{index}"));
        st.reports.insert(
            index,
            ShardReport {
                index,
                end: ShardEnd::Died { reason: "it left during the rendezvous".into() },
                clock: None,
                planned: None,
                skew_ns: None,
                records: 0,
                dir,
            },
        );
    }
    send(w, &Down::Welcome).await.map_err(|e| Refusal::Member(e.to_string()))?;
    loop {
        match recv(r, buf).await {
            Ok(Some(Up::Ping { t1 })) => {
                let t2 = unix_ns();
                send(w, &Down::Pong { t1, t2, t3: unix_ns() })
                    .await
                    .map_err(|e| Refusal::Member(e.to_string()))?;
            }
            Ok(Some(Up::Synced { offset_ns, rtt_ns })) => {
                let mut st = lock(state);
                st.max_rtt = st.max_rtt.max(rtt_ns);
                if let Some(rep) = st.reports.get_mut(&index) {
                    rep.clock = Some(ClockSync { offset_ns, rtt_ns });
                }
                let joined = st.reports.values().filter(|r| r.clock.is_some()).count();
                if joined == st.cfg.count as usize && *st.phase.borrow() == Phase::Joining {
                    st.phase.send_replace(Phase::Joined);
                }
                return Ok(index);
            }
            _ => {
                lock(state).reports.remove(&index);
                return Err(Refusal::Member(format!("shard {index} broke off the clock exchange")));
            }
        }
    }
}

/// From `Joined` to the end: `Ready` and the start, records and files into the shard's
/// directory, `Done`. Returns how the shard ended.
async fn run_phase(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: &mut OwnedWriteHalf,
    buf: &mut Vec<u8>,
    state: &Shared,
    index: u32,
    mut phase: watch::Receiver<Phase>,
) -> ShardEnd {
    let dir = lock(state).cfg.out.join(format!("shard-{index}"));
    let io = |e: std::io::Error| ShardEnd::Died { reason: format!("{}: {e}", dir.display()) };
    if let Err(e) = fs::create_dir_all(&dir) {
        return io(e);
    }
    let mut records = match fs::File::create(dir.join("requests.jsonl")) {
        Ok(f) => std::io::BufWriter::with_capacity(1 << 16, f),
        Err(e) => return io(e),
    };
    let mut started = false;
    let mut stop = lock(state).stop.subscribe();
    let mut stop_sent = false;
    let mut n = 0u64;
    loop {
        tokio::select! {
            ch = stop.changed(), if started && !stop_sent => {
                let reason = stop.borrow_and_update().clone();
                if let (Ok(()), Some(reason)) = (ch, reason) {
                    stop_sent = true;
                    // a member that cannot hear it ends as it would have (its connection)
                    let _ = send(w, &Down::Stop { reason }).await;
                }
            }
            m = recv(r, buf) => {
                let reason = match m {
                    Ok(Some(m)) => Ok(m),
                    Ok(None) => Err("its connection closed before it said done".to_owned()),
                    Err(e) => Err(e.to_string()),
                };
                let m = match reason {
                    Ok(m) => m,
                    Err(reason) => {
                        let _ = records.flush();
                        if !started {
                            abort(state, format!("shard {index} left before the start: {reason}"));
                        }
                        return ShardEnd::Died { reason };
                    }
                };
                match m {
                    Up::Ready { planned } => {
                        let mut st = lock(state);
                        if let Some(rep) = st.reports.get_mut(&index) {
                            rep.planned = planned;
                        }
                        st.ready += 1;
                        if st.ready == st.cfg.count as usize {
                            let at = unix_ns() + i64::try_from(start_lead(st.max_rtt).as_nanos()).unwrap_or(0);
                            st.phase.send_replace(Phase::Start(at));
                        }
                    }
                    Up::Started { skew_ns } => {
                        if let Some(rep) = lock(state).reports.get_mut(&index) {
                            rep.skew_ns = Some(skew_ns);
                        }
                    }
                    Up::Record { line } => {
                        if let Err(e) = records.write_all(line.as_bytes()).and_then(|()| records.write_all(b"\n")) {
                            return io(e);
                        }
                        n += 1;
                        if let Some(rep) = lock(state).reports.get_mut(&index) {
                            rep.records = n;
                        }
                    }
                    Up::File { name, text } => {
                        if !matches!(name.as_str(), "run.json" | "summary.json" | "timeseries.jsonl") {
                            return ShardEnd::Died { reason: format!("it sent a file shard 0 does not take: {name:?}") };
                        }
                        if let Err(e) = fs::write(dir.join(&name), text) {
                            return io(e);
                        }
                    }
                    Up::Done => {
                        if let Err(e) = records.flush() {
                            return io(e);
                        }
                        let _ = send(w, &Down::Received { records: n }).await;
                        return ShardEnd::Finished;
                    }
                    _ => return ShardEnd::Died { reason: "it broke the protocol".into() },
                }
                // on disk as soon as nothing more is waiting on the socket
                if r.buffer().is_empty() {
                    if let Err(e) = records.flush() {
                        return io(e);
                    }
                }
            }
            ch = phase.changed(), if !started => {
                if ch.is_err() {
                    continue;
                }
                let p = phase.borrow_and_update().clone();
                match p {
                    Phase::Start(at) => {
                        started = true;
                        if send(w, &Down::Start { at_unix_ns: at }).await.is_err() {
                            return ShardEnd::Died { reason: "the start could not be sent".into() };
                        }
                    }
                    Phase::Abort(reason) => {
                        let _ = send(w, &Down::Abort { reason: reason.clone() }).await;
                        return ShardEnd::Died { reason };
                    }
                    _ => {}
                }
            }
        }
    }
}
