//! A high-resolution timer for async tasks: one thread keeps the pending deadlines in a
//! heap, sleeps on the OS's high-resolution sleep until the earliest and spins its last
//! few microseconds, then wakes the task. Tokio's own timer rounds up to whole
//! milliseconds, which would put up to a millisecond of the timer into every think time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

type Entry = (Instant, oneshot::Sender<()>);

/// Cheap to clone; the thread ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub(crate) struct Timer {
    tx: mpsc::Sender<Entry>,
}

const SPIN: Duration = Duration::from_micros(60);

impl Timer {
    pub(crate) fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Entry>();
        std::thread::Builder::new()
            .name("quetta-timer".into())
            .spawn(move || run(&rx))
            .expect("spawn the timer thread");
        Self { tx }
    }

    /// Wait until `at` (returns at once if it has passed, or if the timer thread is gone).
    pub(crate) async fn sleep_until(&self, at: Instant) {
        if Instant::now() >= at {
            return;
        }
        let (tx, rx) = oneshot::channel();
        if self.tx.send((at, tx)).is_ok() {
            let _ = rx.await;
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

fn run(rx: &mpsc::Receiver<Entry>) {
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
                if left > SPIN && open {
                    match rx.recv_timeout(left.saturating_sub(SPIN)) {
                        Ok(e) => p.add(e),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
                    }
                } else if left > SPIN {
                    std::thread::sleep(left.saturating_sub(SPIN));
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
