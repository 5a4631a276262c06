//! The rendezvous over real sockets on 127.0.0.1: shards join, measure their clocks, start
//! together and send shard 0 their records; a missing shard, a different plan and a shard
//! that dies mid-run each end the way the crate docs say; a process without the shard
//! secret is refused without calling the run off.

use std::path::PathBuf;
use std::time::Duration;

use quetta_shard::{Coordinator, CoordinatorConfig, Member, ShardEnd, ShardError, ShardSecret};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-shard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn coordinator(n: u32, out: &std::path::Path, timeout: Duration) -> (Coordinator, String) {
    guarded(n, out, timeout, None).await
}

async fn guarded(
    n: u32,
    out: &std::path::Path,
    timeout: Duration,
    secret: Option<ShardSecret>,
) -> (Coordinator, String) {
    let c = Coordinator::start(CoordinatorConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        count: n,
        fingerprint: "plan-1".into(),
        join_timeout: timeout,
        out: out.to_path_buf(),
        secret,
    })
    .await
    .unwrap();
    let addr = c.local_addr().to_string();
    (c, addr)
}

#[test]
fn three_shards_start_together_and_shard_0_gets_every_record() {
    let out = tmp("three");
    rt().block_on(async {
        let (c, addr) = coordinator(3, &out, Duration::from_secs(20)).await;
        let mut tasks = Vec::new();
        for k in 0..3u32 {
            let addr = addr.clone();
            tasks.push(tokio::spawn(async move {
                // the shards come in any order, shard 2 a little late
                tokio::time::sleep(Duration::from_millis(u64::from(k == 2) * 300)).await;
                let mut m =
                    Member::join(&addr, k, 3, "plan-1", None, Duration::from_secs(20)).await?;
                let clock = m.clock();
                m.file("run.json", format!("{{\"shard\":{k}}}"))?;
                let st = m.ready_and_start(Some(10)).await?;
                let at = quetta_shard::unix_ns();
                let rec = m.records();
                for i in 0..10u32 {
                    assert!(rec.send(format!("{{\"id\":{}}}", i * 3 + k)));
                }
                m.file("summary.json", "{}".into())?;
                let got = m.done().await?;
                Ok::<_, ShardError>((clock, st, at, got))
            }));
        }
        let mut starts = Vec::new();
        for t in tasks {
            let (clock, st, at, got) = t.await.unwrap().unwrap();
            assert_eq!(got, 10);
            // one machine, one clock: the offset is the exchange's error
            assert!(clock.offset_ns.abs() < 1_000_000, "{clock:?}");
            assert!(st.skew_ns.abs() < 2_000_000, "{st:?}");
            starts.push(at);
        }
        let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
        assert!(spread < 5_000_000, "the shards started {spread} ns apart");
        let (start, reports) = c.finish(Duration::from_secs(5)).await;
        assert!(start.is_some());
        for r in &reports {
            assert_eq!(r.end, ShardEnd::Finished, "{r:?}");
            assert_eq!((r.records, r.planned), (10, Some(10)));
            let lines = std::fs::read_to_string(r.dir.join("requests.jsonl")).unwrap();
            assert_eq!(lines.lines().count(), 10);
            assert!(r.dir.join("summary.json").is_file() && r.dir.join("run.json").is_file());
        }
    });
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_shard_that_never_comes_is_named() {
    let out = tmp("missing");
    rt().block_on(async {
        let (c, addr) = coordinator(4, &out, Duration::from_millis(800)).await;
        let a = tokio::spawn({
            let addr = addr.clone();
            async move { Member::join(&addr, 0, 4, "plan-1", None, Duration::from_secs(5)).await }
        });
        let b =
            Member::join(&addr, 2, 4, "plan-1", None, Duration::from_secs(5)).await.unwrap_err();
        let e = b.to_string();
        assert!(e.contains("shards 1, 3 of 4 never joined within 1 s"), "{e}");
        assert!(a.await.unwrap().is_err());
        assert_eq!(c.aborted().as_deref(), Some(e.as_str()));
    });
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_shard_with_another_plan_is_refused() {
    let out = tmp("plan");
    rt().block_on(async {
        let (_c, addr) = coordinator(2, &out, Duration::from_secs(5)).await;
        let e =
            Member::join(&addr, 1, 2, "plan-2", None, Duration::from_secs(5)).await.unwrap_err();
        assert!(e.to_string().contains("shard 1's plan differs from shard 0's"), "{e}");
        let (_c, addr) = coordinator(2, &out, Duration::from_secs(5)).await;
        let e =
            Member::join(&addr, 1, 3, "plan-1", None, Duration::from_secs(5)).await.unwrap_err();
        assert!(e.to_string().contains("one of 3 shards, shard 0 as one of 2"), "{e}");
    });
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_shard_that_dies_mid_run_keeps_what_it_sent() {
    let out = tmp("dies");
    rt().block_on(async {
        let (c, addr) = coordinator(2, &out, Duration::from_secs(10)).await;
        let a2 = addr.clone();
        let survivor = tokio::spawn(async move {
            let mut m =
                Member::join(&a2, 0, 2, "plan-1", None, Duration::from_secs(10)).await.unwrap();
            m.ready_and_start(Some(3)).await.unwrap();
            for i in 0..3 {
                m.records().send(format!("{{\"id\":{i}}}"));
            }
            m.done().await.unwrap()
        });
        let mut m =
            Member::join(&addr, 1, 2, "plan-1", None, Duration::from_secs(10)).await.unwrap();
        m.ready_and_start(Some(5)).await.unwrap();
        m.records().send("{\"id\":1}".into());
        m.records().send("{\"id\":3}".into());
        // the process dies: its connection closes without done (what it had queued still
        // goes out first)
        drop(m);
        assert_eq!(survivor.await.unwrap(), 3);
        let (_, reports) = c.finish(Duration::from_secs(5)).await;
        assert_eq!(reports[0].end, ShardEnd::Finished);
        assert!(matches!(reports[1].end, ShardEnd::Died { .. }), "{:?}", reports[1]);
        assert_eq!((reports[1].records, reports[1].planned), (2, Some(5)));
        let kept = std::fs::read_to_string(reports[1].dir.join("requests.jsonl")).unwrap();
        assert_eq!(kept.lines().count(), 2);
    });
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_process_without_the_shard_secret_is_refused_and_the_run_goes_on() {
    let out = tmp("secret");
    let secret = ShardSecret::new("s3cret-of-the-run");
    rt().block_on(async {
        let (c, addr) = guarded(2, &out, Duration::from_secs(10), Some(secret.clone())).await;
        let t = Duration::from_secs(10);
        // it knows the plan and the count, but not the secret: refused, the run not called off
        let e = Member::join(&addr, 1, 2, "plan-1", None, t).await.unwrap_err();
        assert_eq!(e, ShardError::Aborted("no shard secret".into()));
        let wrong = ShardSecret::new("guess");
        let e = Member::join(&addr, 1, 2, "plan-1", Some(&wrong), t).await.unwrap_err();
        assert_eq!(e, ShardError::Aborted("a wrong shard secret".into()));
        assert_eq!(c.aborted(), None);
        // the shards with it join and finish
        let mut shards = Vec::new();
        for k in 0..2u32 {
            let (addr, secret) = (addr.clone(), secret.clone());
            shards.push(tokio::spawn(async move {
                let mut m = Member::join(&addr, k, 2, "plan-1", Some(&secret), t).await?;
                m.ready_and_start(Some(1)).await?;
                m.records().send(format!("{{\"id\":{k}}}"));
                m.done().await
            }));
        }
        for s in shards {
            assert_eq!(s.await.unwrap(), Ok(1));
        }
        let refused = c.refused();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused[0].starts_with("127.0.0.1:") && refused[0].ends_with(": no shard secret"));
        assert!(refused[1].ends_with(": a wrong shard secret"), "{refused:?}");
        assert!(!format!("{refused:?}").contains("guess"), "what an outsider sent is not kept");
        let (start, reports) = c.finish(Duration::from_secs(5)).await;
        assert!(start.is_some());
        assert!(reports.iter().all(|r| r.end == ShardEnd::Finished && r.records == 1));
    });
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn shards_refused_for_want_of_the_secret_are_named_when_the_rendezvous_times_out() {
    let out = tmp("secret-timeout");
    rt().block_on(async {
        let secret = ShardSecret::new("s3cret");
        let (c, addr) = guarded(2, &out, Duration::from_millis(800), Some(secret)).await;
        let t = Duration::from_secs(5);
        let e = Member::join(&addr, 1, 2, "plan-1", None, t).await.unwrap_err();
        assert_eq!(e, ShardError::Aborted("no shard secret".into()));
        let e = Member::join(&addr, 0, 2, "plan-1", Some(&ShardSecret::new("s3cret")), t)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shard 1 of 2 never joined") && e.contains("it refused 1: 127.0.0.1:"),
            "{e}"
        );
        assert!(e.ends_with(": no shard secret)"), "{e}");
        drop(c);
    });
    let _ = std::fs::remove_dir_all(&out);
}
