//! Sharded runs end to end: separate `quetta-bench` processes, one per shard, meet at shard 0
//! (`--coordinator`, with the shard secret from the environment), start together, send
//! shard 0 their records and get one merged run.
//!
//! Run twice: over 127.0.0.1, and as separate hosts, each process in its own network
//! namespace (its own address, joined to the others by veth pairs and a bridge), the
//! simulator in a fourth. The namespaces share the kernel's clock, so the clock offset each
//! shard measures is its own error, and the shards' start instants can be compared directly.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{json, tmpdir, valid, SUMMARY_SCHEMA};

const RATE: f64 = 200.0;
const SECRET_ENV: &str = "QUETTA_SHARD_SECRET";
/// The shard secret of the first run of each test: in no output, no file.
const SECRET: &str = "shard-canary-5f1d";
const REQUESTS: u64 = 600;

/// Where each process runs: a command prefix (`ip netns exec NS`) and its address.
struct Host {
    prefix: Vec<String>,
    addr: String,
}

fn command(h: &Host, program: &Path) -> Command {
    let mut c = match h.prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    };
    c.env_remove("OPENAI_API_KEY").env_remove("JOB_COMPLETION_INDEX").env_remove(SECRET_ENV);
    c
}

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The `quetta-sim` binary, built beside `quetta-bench` by `cargo test --workspace`.
fn quetta_sim() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_quetta-bench")).with_file_name("quetta-sim");
    assert!(
        exe.is_file(),
        "{} is missing: cargo build -p quetta-sim-bin first (cargo test --workspace builds it)",
        exe.display()
    );
    exe
}

/// The simulator (the `quetta-sim` binary: TTFT 20 ms, ITL 2 ms) on `host` at `bind`;
/// returns once it listens.
fn simulator(host: &Host, bind: &str) -> Child {
    let (ip, port) = bind.rsplit_once(':').unwrap();
    let mut c = command(host, &quetta_sim())
        .args(["--host", ip, "--port", port, "--ttft-ms", "20", "--itl-ms", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    let ready = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("listening on"));
    assert!(ready, "the simulator process did not start");
    c
}

/// Three shards on `hosts[1..]` against the simulator at `sim`, shard 0's coordinator at
/// `port` of its host, each given `secret` (if any); shard `kill` (if any) is killed a
/// second into the run, or, with `interrupt`, shard 0 gets SIGINT (Ctrl-C) then. Shard 0's
/// output.
fn sharded_run(
    hosts: &[Host],
    sim: &str,
    port: u16,
    out: &Path,
    kill: Option<usize>,
    secret: Option<&str>,
    interrupt: bool,
) -> (std::process::Output, Vec<PathBuf>) {
    let _ = std::fs::remove_dir_all(out);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_quetta-bench"));
    let url = format!("http://{sim}");
    let coord = format!("{}:{port}", hosts[1].addr);
    let rate = RATE.to_string();
    let n = REQUESTS.to_string();
    let mut children = Vec::new();
    let mut dirs = Vec::new();
    // shards 2 and 1 first: they wait for shard 0
    for k in [2usize, 1, 0] {
        let dir =
            out.with_file_name(format!("{}-own-{k}", out.file_name().unwrap().to_string_lossy()));
        let dir = if k == 0 { out.to_path_buf() } else { dir };
        let shard = format!("{k}/3");
        let mut c = command(&hosts[k + 1], &bin);
        if let Some(s) = secret {
            c.env(SECRET_ENV, s);
        }
        let c = c
            .args(["run", "--base-url", &url, "--shard", &shard, "--coordinator", &coord])
            .args(["--request-rate", &rate, "--arrival", "constant", "--num-requests", &n])
            .args([
                "--input-len",
                "32",
                "--output-len",
                "16",
                "--quiet",
                "--rendezvous-timeout",
                "30s",
            ])
            .arg("--output-dir")
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        children.push((k, c));
        dirs.push(dir);
    }
    if interrupt || kill.is_some() {
        // a second into the run (it lasts three)
        std::thread::sleep(Duration::from_secs(1));
    }
    if interrupt {
        let pid = children.iter().find(|(k, _)| *k == 0).unwrap().1.id().to_string();
        assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    }
    if let Some(k) = kill {
        children.iter_mut().find(|(i, _)| *i == k).unwrap().1.kill().unwrap();
    }
    let mut zero = None;
    for (k, c) in children {
        let o = c.wait_with_output().unwrap();
        if k == 0 {
            zero = Some(o);
        } else if kill.is_none_or(|x| x != 0 && x != k) {
            assert!(o.status.success(), "shard {k}: {}", common::text(&o));
        }
    }
    (zero.unwrap(), dirs)
}

/// What a sharded run must show: every shard joined, started within 5 ms, the plan sent
/// at the rate asked for, and the merged percentiles those of the union of the records.
fn check_merged(out: &Path, o: &std::process::Output) -> serde_json::Value {
    let t = common::text(o);
    assert!(o.status.success(), "{t}");
    // the shards had the secret: no warning, and the secret is nowhere in what they wrote
    assert!(!t.contains(SECRET_ENV) && !t.contains(SECRET), "{t}");
    for f in walk(out) {
        let bytes = std::fs::read(&f).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(SECRET), "the shard secret is in {}", f.display());
    }
    assert!(t.contains("shards     3 of 3 merged (3 finished"), "{t}");
    let s = json(&out.join("summary.json"));
    valid(SUMMARY_SCHEMA, &s);
    valid(include_str!("../../../docs/schema/run.schema.json"), &json(&out.join("run.json")));
    assert_eq!(
        (s["completed"].as_u64(), s["planned"].as_u64()),
        (Some(REQUESTS), Some(REQUESTS)),
        "{t}"
    );
    let rate = s["achieved_send_rate"].as_f64().unwrap();
    assert!((rate / RATE - 1.0).abs() < 0.02, "aggregate rate {rate} for {RATE}");
    // the shards' own start instants, read on the one clock they share
    let mut starts = Vec::new();
    let mut union = quetta_metrics::Aggregate::new(None);
    for k in 0..3 {
        let d = out.join(format!("shard-{k}"));
        let own = json(&d.join("summary.json"));
        valid(SUMMARY_SCHEMA, &own);
        let sh = &own["shard"];
        starts.push(sh["started_unix_ns"].as_i64().unwrap());
        assert!(sh["clock_offset_ms"].as_f64().unwrap().abs() < 1.0, "{sh}");
        for line in std::fs::read_to_string(d.join("requests.jsonl")).unwrap().lines() {
            union.add(&serde_json::from_str(line).unwrap());
        }
    }
    let spread = (starts.iter().max().unwrap() - starts.iter().min().unwrap()) as f64 / 1e6;
    // Each shard sleeps to 20 µs before the shared instant and spins the rest; what is left
    // is the host's: one 2-vCPU VM kept even a spinning thread off its vCPU for up to 8 ms
    // (35-40 stalls over 0.1 ms a second), and a fresh-clone CI run there saw 5.9 ms. A start
    // that is wrong in kind (a shard starting on its own connect, or a clock offset taken
    // with the wrong sign) is hundreds of ms off.
    assert!(spread < 10.0, "the shards started {spread} ms apart");
    eprintln!("start spread {spread:.3} ms; {}", s["shards"]);
    let m = serde_json::to_value(union.summary(&[])).unwrap();
    for key in [
        "ttft_ms",
        "tpot_ms",
        "itl_ms",
        "e2e_ms",
        "ttft_from_intended_ms",
        "completed",
        "total_output_tokens",
    ] {
        assert_eq!(s[key], m[key], "{key}: merged against the union of the shards' records");
    }
    s
}

/// Ctrl-C on shard 0 stopped every shard: each drained, marked itself partial and sent what
/// it measured; the merged run is partial and holds every record.
fn check_interrupted(out: &Path, o: &std::process::Output) {
    let t = common::text(o);
    assert_eq!(o.status.code(), Some(130), "{t}");
    let s = json(&out.join("summary.json"));
    valid(SUMMARY_SCHEMA, &s);
    assert_eq!((&s["partial"], &s["partial_reason"]), (&true.into(), &"stopped".into()), "{t}");
    let mut sum = 0;
    for k in 0..3 {
        let own = json(&out.join(format!("shard-{k}/summary.json")));
        assert_eq!(own["partial"], true, "shard {k}");
        let why = if k == 0 { "stopped" } else { "stopped_by_shard0" };
        assert_eq!(own["partial_reason"], why, "shard {k}");
        let notes = own["notes"].to_string();
        assert!(k == 0 || notes.contains("stopped early: shard 0 was stopped"), "{k}: {notes}");
        let done = own["completed"].as_u64().unwrap();
        assert!(done > 0 && done < REQUESTS / 3, "shard {k} stopped early: {done}");
        let lines = std::fs::read_to_string(out.join(format!("shard-{k}/requests.jsonl")))
            .unwrap()
            .lines()
            .count() as u64;
        assert_eq!(lines, own["completed"].as_u64().unwrap() + own["failed"].as_u64().unwrap());
        sum += done;
    }
    assert_eq!(s["completed"].as_u64().unwrap(), sum, "nothing measured is lost");
}

/// Shard 0 died a second in: the others ran their slices to the end on their own disks
/// (`OWN/local/shard-K`), and those merge exactly into a run that names shard 0 as missing.
fn check_survivors(dirs: &[PathBuf], merged: &Path) {
    let locals: Vec<PathBuf> = [(&dirs[1], 1), (&dirs[0], 2)]
        .iter()
        .map(|(d, k)| d.join(format!("local/shard-{k}")))
        .collect();
    let mut union = quetta_metrics::Aggregate::new(None);
    for (k, d) in locals.iter().enumerate() {
        let own = json(&d.join("summary.json"));
        valid(SUMMARY_SCHEMA, &own);
        assert_eq!(own["shard"]["index"], k + 1);
        let text = std::fs::read_to_string(d.join("requests.jsonl")).unwrap();
        assert_eq!(text.lines().count() as u64, REQUESTS / 3, "shard {}: its whole slice", k + 1);
        for line in text.lines() {
            union.add(&serde_json::from_str(line).unwrap());
        }
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_quetta-bench"));
    let o = Command::new(bin)
        .arg("merge")
        .args(&locals)
        .arg("--output-dir")
        .arg(merged)
        .output()
        .unwrap();
    let t = common::text(&o);
    let s = json(&merged.join("summary.json"));
    valid(SUMMARY_SCHEMA, &s);
    assert_eq!(s["partial"], true, "{t}");
    assert!(s["notes"].to_string().contains("shards 0 of 3 are missing"), "{}", s["notes"]);
    let m = serde_json::to_value(union.summary(&[])).unwrap();
    for key in ["completed", "ttft_ms", "e2e_ms", "itl_ms"] {
        assert_eq!(s[key], m[key], "{key}: merged against the union of the survivors' records");
    }
}

fn check_killed(out: &Path, o: &std::process::Output) {
    let t = common::text(o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    // no secret given: shard 0 says that anyone who reaches it may join
    assert!(t.contains("--coordinator without QUETTA_SHARD_SECRET"), "{t}");
    assert!(t.contains("the run lost shards: 2 died"), "{t}");
    let s = json(&out.join("summary.json"));
    valid(SUMMARY_SCHEMA, &s);
    let dead = &s["shards"]["shards"][2];
    assert_eq!(dead["status"], "died", "{dead}");
    assert_eq!(dead["planned"], REQUESTS / 3, "{dead}");
    let done = dead["completed"].as_u64().unwrap();
    assert!(done > 0 && done < REQUESTS / 3, "{dead}");
    let others: u64 = (0..2).map(|k| s["shards"]["shards"][k]["completed"].as_u64().unwrap()).sum();
    assert_eq!(others, 2 * REQUESTS / 3, "the others measured everything");
    assert_eq!(s["completed"].as_u64().unwrap(), others + done, "nothing measured is lost");
    assert_eq!(s["partial"], true);
    assert!(t.contains("shard 2 died: it completed"), "{t}");
}

/// Every file under `d`.
fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().map(Result::unwrap) {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The two runs share the machine's cores: one at a time, so neither measures the other's
/// load in its start skew.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn three_shard_processes_over_loopback_merge_exactly_and_survive_a_dead_shard() {
    let _alone = alone();
    let hosts: Vec<Host> =
        (0..4).map(|_| Host { prefix: vec![], addr: "127.0.0.1".into() }).collect();
    let sim = format!("127.0.0.1:{}", free_port());
    let _sim = Killed(vec![simulator(&hosts[0], &sim)]);
    let d = tmpdir("shards-lo");
    let out = d.join("merged");
    let (o, _) = sharded_run(&hosts, &sim, free_port(), &out, None, Some(SECRET), false);
    check_merged(&out, &o);
    let out = d.join("killed");
    let (o, _) = sharded_run(&hosts, &sim, free_port(), &out, Some(2), None, false);
    check_killed(&out, &o);
    let out = d.join("interrupted");
    let (o, _) = sharded_run(&hosts, &sim, free_port(), &out, None, Some(SECRET), true);
    check_interrupted(&out, &o);
    let out = d.join("zero-died");
    let (_, dirs) = sharded_run(&hosts, &sim, free_port(), &out, Some(0), Some(SECRET), false);
    check_survivors(&dirs, &d.join("survivors"));
    let _ = std::fs::remove_dir_all(&d);
}

/// Network namespaces `NAME-0..4` (the simulator, shards 0, 1, 2) on a bridge in `NAME-sw`,
/// addresses 10.213.0.1 to .4; removed on drop.
struct Namespaces {
    name: String,
    hosts: Vec<Host>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

impl Namespaces {
    fn create() -> Result<Self, String> {
        let name = format!("qt{}", std::process::id() % 100_000);
        let mut ns = Namespaces { name: name.clone(), hosts: Vec::new() };
        let sw = format!("{name}-sw");
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..4 {
            let h = format!("{name}-{i}");
            let addr = format!("10.213.0.{}", i + 1);
            ip(&["netns", "add", &h])?;
            let port = format!("p{i}");
            ip(&[
                "link", "add", "eth0", "netns", &h, "type", "veth", "peer", "name", &port, "netns",
                &sw,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            ip(&["-n", &h, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            ip(&["-n", &h, "link", "set", "eth0", "up"])?;
            ip(&["-n", &h, "link", "set", "lo", "up"])?;
            ns.hosts
                .push(Host { prefix: vec!["ip".into(), "netns".into(), "exec".into(), h], addr });
        }
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for i in 0..4 {
            let _ = ip(&["netns", "del", &format!("{}-{i}", self.name)]);
        }
        let _ = ip(&["netns", "del", &format!("{}-sw", self.name)]);
    }
}

#[test]
fn three_shards_as_separate_hosts_in_network_namespaces() {
    let _alone = alone();
    let ns = match Namespaces::create() {
        Ok(ns) => ns,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must be able to make network namespaces: {e}"
            );
            eprintln!("SKIPPED: cannot make network namespaces here ({e})");
            return;
        }
    };
    let sim = format!("{}:8000", ns.hosts[0].addr);
    let _sim = Killed(vec![simulator(&ns.hosts[0], &sim)]);
    let d = tmpdir("shards-netns");
    let out = d.join("merged");
    let (o, _) = sharded_run(&ns.hosts, &sim, 7000, &out, None, Some(SECRET), false);
    let s = check_merged(&out, &o);
    eprintln!(
        "netns: rate {} skew {} offset {}",
        s["achieved_send_rate"],
        s["shards"]["max_start_skew_ms"],
        s["shards"]["max_clock_offset_ms"]
    );
    let out = d.join("killed");
    let (o, _) = sharded_run(&ns.hosts, &sim, 7001, &out, Some(2), None, false);
    check_killed(&out, &o);
    let _ = std::fs::remove_dir_all(&d);
}
