//! `SimConfig::nice` lowers the priority of every simulator thread (Linux keeps a nice value
//! per thread; `/proc/self/task/TID/stat` shows it). One test in its own binary, so that no
//! other simulator's threads are in the process.

#[cfg(target_os = "linux")]
#[test]
fn nice_lowers_every_simulator_thread() {
    use quetta_sim::{SimConfig, Simulator};

    /// (name, nice) of each thread of this process.
    fn threads() -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
            // pid (comm) state ppid ...: fields after the ')' start at field 3; nice is 19.
            let (head, rest) = stat.rsplit_once(')').unwrap();
            let name = head.split_once('(').unwrap().1.to_string();
            let nice = rest.split_whitespace().nth(16).unwrap().parse().unwrap();
            out.push((name, nice));
        }
        out
    }

    let sim = Simulator::start(SimConfig { nice: 12, worker_threads: 2, ..SimConfig::default() })
        .unwrap();
    // The server thread lowers itself as it starts: wait until it has.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let sims = loop {
        let sims: Vec<_> =
            threads().into_iter().filter(|(n, _)| n.starts_with("quetta-sim")).collect();
        if sims.len() >= 3 && sims.iter().all(|(_, n)| *n == 12) {
            break sims;
        }
        assert!(std::time::Instant::now() < deadline, "simulator threads not niced: {sims:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(sims.iter().any(|(n, _)| n == "quetta-sim-main"), "{sims:?}");
    // The caller's own thread is untouched.
    let me = threads().into_iter().find(|(n, _)| n.starts_with("nice_lowers")).unwrap();
    assert_eq!(me.1, 0, "the test's thread kept its priority");
    drop(sim);
}
