//! A high-resolution timer for async tasks: one thread keeps the pending deadlines in a
//! heap, sleeps on the OS's high-resolution sleep until the earliest (on Linux with a timer
//! slack of 1 µs instead of the default 50 µs) and may spin its last few microseconds,
//! then wakes the task. Tokio's own timer rounds up to whole milliseconds, which would put
//! up to a millisecond of the timer into every think time (the client's sessions) and every
//! gap between tokens (the simulator).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

type Entry = (Instant, oneshot::Sender<()>);

/// Cheap to clone; the thread ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Timer {
    tx: mpsc::Sender<Entry>,
}

/// What [`Timer::start`] spins before a deadline: a wake-up within microseconds, for a few
/// deadlines a second (think times).
pub const SPIN: Duration = Duration::from_micros(60);

impl Timer {
    /// A timer that spins the last [`SPIN`] before each deadline.
    pub fn start() -> Self {
        Self::with_spin(SPIN)
    }

    /// A timer that spins the last `spin` before each deadline: zero for many deadlines a
    /// second (a simulator's tokens), where a spinning thread would take a core; the OS sleep
    /// alone wakes within tens of microseconds.
    pub fn with_spin(spin: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<Entry>();
        std::thread::Builder::new()
            .name("quetta-timer".into())
            .spawn(move || {
                #[cfg(target_os = "linux")]
                let _ = nix::sys::prctl::set_timerslack(1_000);
                run(&rx, spin);
            })
            .expect("spawn the timer thread");
        Self { tx }
    }

    /// A future that is ready at `at` (at once if it has passed, or if the timer thread is
    /// gone); it owns what it waits on.
    pub fn sleep_until(&self, at: Instant) -> Sleep {
        if Instant::now() >= at {
            return Sleep(None);
        }
        let (tx, rx) = oneshot::channel();
        Sleep(self.tx.send((at, tx)).is_ok().then_some(rx))
    }
}

/// [`Timer::sleep_until`]'s future.
#[derive(Debug)]
pub struct Sleep(Option<oneshot::Receiver<()>>);

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.0.as_mut() {
            None => Poll::Ready(()),
            Some(rx) => Pin::new(rx).poll(cx).map(|_| ()),
        }
    }
}

#[derive(Default)]
struct Pending {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    waiting: HashMap<u64, oneshot::Sender<()>>,
    seq: u64,
}

impl Pending {
    fn add(&mut self, (at, tx): Entry) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq)));
        self.waiting.insert(self.seq, tx);
    }

    /// Wake every task whose deadline has passed; the earliest deadline left.
    fn fire(&mut self) -> Option<Instant> {
        let now = Instant::now();
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > now {
                return Some(at);
            }
            self.heap.pop();
            if let Some(tx) = self.waiting.remove(&id) {
                let _ = tx.send(());
            }
        }
        None
    }
}

fn run(rx: &mpsc::Receiver<Entry>, spin: Duration) {
    let mut p = Pending::default();
    let mut open = true;
    loop {
        match p.fire() {
            None if !open => return,
            None => match rx.recv() {
                Ok(e) => p.add(e),
                Err(_) => return,
            },
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left > spin && open {
                    match rx.recv_timeout(left.saturating_sub(spin)) {
                        Ok(e) => p.add(e),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
                    }
                } else if left > spin {
                    std::thread::sleep(left.saturating_sub(spin));
                } else {
                    if open {
                        match rx.try_recv() {
                            Ok(e) => p.add(e),
                            Err(TryRecvError::Empty) => {}
                            Err(TryRecvError::Disconnected) => open = false,
                        }
                    }
                    std::hint::spin_loop();
                }
            }
        }
    }
}
