//! One shard's side of the rendezvous.

use std::time::{Duration, Instant};

use tokio::io::BufReader;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::wire::{recv, send, Down, Up};
use crate::{unix_ns, ShardError, ShardSecret};

/// The member's clock against shard 0's: `offset_ns` is shard 0's wall clock minus this
/// member's (add it to a local instant to get shard 0's), from the exchange with the
/// shortest round trip, whose half bounds the offset's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSync {
    pub offset_ns: i64,
    pub rtt_ns: u64,
}

/// The common start as this member met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The instant shard 0 set, on its wall clock.
    pub at_unix_ns: i64,
    /// When this member started, on shard 0's clock (through the offset), minus `at_unix_ns`.
    pub skew_ns: i64,
}

/// Sends records to shard 0 from any thread (the recorder's), without waiting.
#[derive(Debug, Clone)]
pub struct RecordSender(mpsc::UnboundedSender<Up>);

impl RecordSender {
    /// Queue one record (a JSON line without its newline); false once the connection is gone.
    pub fn send(&self, line: String) -> bool {
        self.0.send(Up::Record { line }).is_ok()
    }
}

/// A shard joined to shard 0.
#[derive(Debug)]
pub struct Member {
    index: u32,
    clock: ClockSync,
    tx: mpsc::UnboundedSender<Up>,
    writer: tokio::task::JoinHandle<Result<(), ShardError>>,
    start: Option<oneshot::Receiver<Result<i64, ShardError>>>,
    received: Option<oneshot::Receiver<Result<u64, ShardError>>>,
    sent_records: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: tokio::sync::watch::Receiver<Option<String>>,
}

async fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, ShardError> {
    // shard 0 may not be listening yet (pods start in any order): try until the deadline
    let mut last = String::new();
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "connect timed out".into(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(ShardError::Connect(format!(
        "shard 0 at {addr} could not be reached before the rendezvous timeout: {last}"
    )))
}

/// The NTP exchange: 16 rounds, the shortest round trip's offset.
async fn sync_clock(
    r: &mut BufReader<OwnedReadHalf>,
    w: &mut OwnedWriteHalf,
    buf: &mut Vec<u8>,
) -> Result<ClockSync, ShardError> {
    let mut best: Option<ClockSync> = None;
    for _ in 0..16 {
        let t1 = unix_ns();
        send(w, &Up::Ping { t1 }).await?;
        let Some(Down::Pong { t1: e, t2, t3 }) = recv(r, buf).await? else {
            return Err(ShardError::Protocol("shard 0 did not answer the clock exchange".into()));
        };
        let t4 = unix_ns();
        if e != t1 {
            return Err(ShardError::Protocol("a clock answer to another question".into()));
        }
        let rtt = u64::try_from((t4 - t1) - (t3 - t2)).unwrap_or(0);
        let offset = ((t2 - t1) + (t3 - t4)) / 2;
        if best.is_none_or(|b| rtt < b.rtt_ns) {
            best = Some(ClockSync { offset_ns: offset, rtt_ns: rtt });
        }
    }
    Ok(best.expect("16 rounds"))
}

impl Member {
    /// Join the run at shard 0 (`addr`, HOST:PORT) as shard `index` of `count`: connect
    /// (retrying until `timeout`), introduce the plan's `fingerprint`, measure the clock, and
    /// wait until every shard has joined.
    pub async fn join(
        addr: &str,
        index: u32,
        count: u32,
        fingerprint: &str,
        secret: Option<&ShardSecret>,
        timeout: Duration,
    ) -> Result<Member, ShardError> {
        let deadline = Instant::now() + timeout;
        let (rd, mut w) = connect(addr, deadline).await?.into_split();
        let mut r = BufReader::new(rd);
        let mut buf = Vec::new();
        let hello = Up::Hello {
            index,
            count,
            fingerprint: fingerprint.to_owned(),
            secret: secret.cloned(),
        };
        send(&mut w, &hello).await?;
        match recv(&mut r, &mut buf).await? {
            Some(Down::Welcome) => {}
            Some(Down::Abort { reason }) => return Err(ShardError::Aborted(reason)),
            _ => return Err(ShardError::Protocol("shard 0 did not welcome this shard".into())),
        }
        let clock = sync_clock(&mut r, &mut w, &mut buf).await?;
        send(&mut w, &Up::Synced { offset_ns: clock.offset_ns, rtt_ns: clock.rtt_ns }).await?;
        // shard 0 answers once all have joined, or calls it off at its own timeout
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        match tokio::time::timeout(wait, recv(&mut r, &mut buf)).await {
            Ok(Ok(Some(Down::Joined))) => {}
            Ok(Ok(Some(Down::Abort { reason }))) => return Err(ShardError::Aborted(reason)),
            Ok(Err(e)) => return Err(e),
            Ok(Ok(_)) => return Err(ShardError::Protocol("shard 0 ended the rendezvous".into())),
            Err(_) => {
                return Err(ShardError::Aborted(
                    "shard 0 did not say that every shard had joined".into(),
                ))
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let sent_records = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = tokio::spawn(write_loop(w, rx, sent_records.clone()));
        let (start_tx, start_rx) = oneshot::channel();
        let (recv_tx, recv_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(None);
        tokio::spawn(read_loop(r, start_tx, recv_tx, stop_tx));
        Ok(Member {
            index,
            clock,
            tx,
            writer,
            start: Some(start_rx),
            received: Some(recv_rx),
            sent_records,
            stop: stop_rx,
        })
    }

    /// Why shard 0 told this shard to stop (shard 0 was stopped), once it has: `None`
    /// until then.
    pub fn stop_signal(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.stop.clone()
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    pub fn clock(&self) -> ClockSync {
        self.clock
    }

    /// A handle the record sink sends through.
    pub fn records(&self) -> RecordSender {
        RecordSender(self.tx.clone())
    }

    /// Send one of the run's files (run.json, summary.json, timeseries.jsonl).
    pub fn file(&self, name: &str, text: String) -> Result<(), ShardError> {
        self.tx
            .send(Up::File { name: name.to_owned(), text })
            .map_err(|_| ShardError::Protocol("the connection to shard 0 is closed".into()))
    }

    /// Say this shard is ready (its warmup done, `planned` measured requests ahead), wait for
    /// shard 0's start instant and return at it (its own clock, through the offset).
    pub async fn ready_and_start(&mut self, planned: Option<u64>) -> Result<Started, ShardError> {
        let closed = || ShardError::Protocol("the connection to shard 0 is closed".into());
        self.tx.send(Up::Ready { planned }).map_err(|_| closed())?;
        let rx = self.start.take().ok_or_else(|| ShardError::Protocol("started twice".into()))?;
        let at = rx.await.map_err(|_| closed())??;
        let local = at - self.clock.offset_ns;
        let wait = u64::try_from(local - unix_ns()).unwrap_or(0);
        let target = Instant::now() + Duration::from_nanos(wait);
        // the runtime's timer (1 ms wheel) to 20 ms before, the OS's high-resolution sleep
        // to 20 µs before, then a short spin: the runtime's timer alone wakes a millisecond
        // or more late on a busy machine, and a long spin takes a core from whatever else
        // must start at that instant (other shards on one machine, the recorder)
        if let Some(early) = target.checked_sub(Duration::from_millis(20)) {
            tokio::time::sleep_until(early.into()).await;
        }
        tokio::task::block_in_place(|| {
            let left = target.saturating_duration_since(Instant::now());
            if let Some(d) = left.checked_sub(Duration::from_micros(20)) {
                std::thread::sleep(d);
            }
            while Instant::now() < target {
                std::hint::spin_loop();
            }
        });
        let skew_ns = unix_ns() + self.clock.offset_ns - at;
        self.tx.send(Up::Started { skew_ns }).map_err(|_| closed())?;
        Ok(Started { at_unix_ns: at, skew_ns })
    }

    /// End this shard's part: everything queued goes out, then `Done`; returns once shard 0
    /// has acknowledged every record.
    pub async fn done(mut self) -> Result<u64, ShardError> {
        let _ = self.tx.send(Up::Done);
        self.writer.await.map_err(|e| ShardError::Protocol(e.to_string()))??;
        let rx = self.received.take().expect("once");
        let got = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .map_err(|_| ShardError::Protocol("shard 0 did not acknowledge the records".into()))?
            .map_err(|_| ShardError::Protocol("shard 0 closed before acknowledging".into()))??;
        let sent = self.sent_records.load(std::sync::atomic::Ordering::SeqCst);
        if got != sent {
            return Err(ShardError::Protocol(format!(
                "shard 0 received {got} of the {sent} records this shard sent"
            )));
        }
        Ok(got)
    }
}

async fn write_loop(
    mut w: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Up>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), ShardError> {
    use tokio::io::AsyncWriteExt;
    let mut out = tokio::io::BufWriter::with_capacity(1 << 16, &mut w);
    while let Some(m) = rx.recv().await {
        let done = matches!(m, Up::Done);
        if matches!(m, Up::Record { .. }) {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        send(&mut out, &m).await?;
        // write out whenever the queue is empty: a record leaves as soon as it is made
        if done || rx.is_empty() {
            out.flush().await.map_err(|e| ShardError::Protocol(format!("send: {e}")))?;
        }
        if done {
            break;
        }
    }
    drop(out);
    let _ = w.shutdown().await;
    Ok(())
}

async fn read_loop(
    mut r: BufReader<OwnedReadHalf>,
    start: oneshot::Sender<Result<i64, ShardError>>,
    received: oneshot::Sender<Result<u64, ShardError>>,
    stop: tokio::sync::watch::Sender<Option<String>>,
) {
    let mut buf = Vec::new();
    let mut start = Some(start);
    let err = loop {
        match recv(&mut r, &mut buf).await {
            Ok(Some(Down::Start { at_unix_ns })) => {
                if let Some(s) = start.take() {
                    let _ = s.send(Ok(at_unix_ns));
                }
            }
            Ok(Some(Down::Received { records })) => {
                let _ = received.send(Ok(records));
                return;
            }
            Ok(Some(Down::Abort { reason })) => break ShardError::Aborted(reason),
            Ok(Some(Down::Stop { reason })) => {
                stop.send_replace(Some(reason));
            }
            Ok(Some(_)) => break ShardError::Protocol("an unexpected message from shard 0".into()),
            Ok(None) => break ShardError::Protocol("shard 0 closed the connection".into()),
            Err(e) => break e,
        }
    };
    if let Some(s) = start.take() {
        let _ = s.send(Err(err.clone()));
    }
    let _ = received.send(Err(err));
}
