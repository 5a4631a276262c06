//! `quetta-bench k8s`: every manifest it prints passes the Kubernetes API schemas with
//! unknown fields rejected (`kubernetes-validate --strict`, from PyPI; `.ci/run` installs
//! it), says what a sharded run needs, and never carries a secret.

use std::process::Command;

use crate::common::{bin, text, tmpdir};

fn validator() -> Option<&'static str> {
    let ok = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "CI must install kubernetes-validate (pip)");
        eprintln!(
            "SKIPPED: kubernetes-validate is not installed (pip install kubernetes-validate)"
        );
        return None;
    }
    Some("kubernetes-validate")
}

fn manifest(args: &[&str]) -> String {
    let o = bin()
        .arg("k8s")
        .args(args)
        .env("OPENAI_API_KEY", "sk-never-in-a-manifest")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The manifest's YAML documents, read by a YAML parser.
fn docs(m: &str) -> Vec<serde_json::Value> {
    assert!(m.starts_with("---\napiVersion: v1\nkind: Service\n"), "YAML, not JSON:\n{m}");
    m.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect()
}

#[test]
fn manifests_pass_the_kubernetes_schemas_strictly() {
    let cases: [&[&str]; 3] = [
        &[
            "--shards",
            "8",
            "--container-image",
            "registry.example/quetta:0.1",
            "--base-url",
            "http://vllm:8000",
            "--request-rate",
            "400",
            "--duration",
            "10m",
        ],
        &[
            "--shards",
            "3",
            "--container-image",
            "q:1",
            "--base-url",
            "http://vllm:8000",
            "--concurrency",
            "96",
            "--num-requests",
            "30000",
            "--name",
            "soak",
            "--namespace",
            "bench",
            "--results-pvc",
            "results",
            "--api-key-secret",
            "vllm:token",
            "--cpu",
            "4",
            "--memory",
            "8Gi",
        ],
        &[
            "--shards",
            "2",
            "--container-image",
            "q:1",
            "--base-url",
            "http://vllm:8000",
            "--request-rate",
            "50",
            "--num-requests",
            "1000",
            "--storage-class",
            "nfs",
            "--results-size",
            "20Gi",
            "--port=7100",
        ],
    ];
    let d = tmpdir("k8s");
    std::fs::create_dir_all(&d).unwrap();
    let v = validator();
    for (i, args) in cases.iter().enumerate() {
        let m = manifest(args);
        assert!(!m.contains("sk-never"), "the key from the environment is in the manifest");
        let objs = docs(&m);
        let job = objs.iter().find(|o| o["kind"] == "Job").unwrap();
        let svc = objs.iter().find(|o| o["kind"] == "Service").unwrap();
        let n: u64 = args[1].parse().unwrap();
        assert_eq!(job["spec"]["completionMode"], "Indexed");
        assert_eq!(
            (job["spec"]["completions"].as_u64(), job["spec"]["parallelism"].as_u64()),
            (Some(n), Some(n))
        );
        assert_eq!(job["spec"]["backoffLimitPerIndex"], 0);
        assert_eq!(svc["spec"]["clusterIP"], "None");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["subdomain"], svc["metadata"]["name"]);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let c = &pod["containers"][0];
        let a: Vec<&str> =
            c["args"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(a[0], "run");
        assert!(a.contains(&"--base-url") && a.contains(&"http://vllm:8000"), "{a:?}");
        assert!(!a.contains(&"--container-image") && !a.contains(&"--cpu"), "{a:?}");
        assert!(!a.contains(&"--image"), "the container's image is not a shard's flag: {a:?}");
        assert!(c["image"].as_str().unwrap().contains(':'), "{}", c["image"]);
        let w = a.iter().position(|x| *x == "--shards").unwrap();
        assert_eq!(a[w + 1], args[1]);
        let co = a[a.iter().position(|x| *x == "--coordinator").unwrap() + 1];
        let name = svc["metadata"]["name"].as_str().unwrap();
        assert!(co.starts_with(&format!("{name}-0.{name}:")), "{co}");
        assert!(c["resources"]["requests"]["cpu"].is_string());
        let env = |n: &str| {
            let e = c["env"].as_array().unwrap().iter().find(|e| e["name"] == n);
            e.map(|e| e["valueFrom"]["secretKeyRef"].clone())
        };
        // every shard gets the shard secret from a Secret, never its value
        let want = serde_json::json!({"name": format!("{name}-shard-secret"), "key": "secret"});
        assert_eq!(env("QUETTA_SHARD_SECRET"), Some(want));
        if i == 1 {
            assert_eq!(env("OPENAI_API_KEY").unwrap()["key"], "token");
            assert!(objs.iter().all(|o| o["kind"] != "PersistentVolumeClaim"), "an existing claim");
            assert_eq!(pod["volumes"][0]["persistentVolumeClaim"]["claimName"], "results");
        }
        let f = d.join(format!("m{i}.yaml"));
        std::fs::write(&f, &m).unwrap();
        if let Some(v) = v {
            let o = Command::new(v).arg("--strict").arg(&f).output().unwrap();
            assert!(o.status.success(), "{}\n{m}", text(&o));
            let t = text(&o);
            assert_eq!(t.matches("passed for resource").count(), objs.len(), "{t}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn what_cannot_be_a_sharded_run_on_kubernetes_is_refused() {
    for (args, says) in [
        (&["--shards", "2", "--container-image", "q"][..], "--base-url"),
        (
            &[
                "--shards",
                "2",
                "--container-image",
                "q",
                "--base-url",
                "http://x:1",
                "--api-key",
                "sk-1",
            ][..],
            "--api-key-secret",
        ),
        (
            &[
                "--shards",
                "4",
                "--container-image",
                "q",
                "--base-url",
                "http://x:1",
                "--concurrency",
                "2",
            ][..],
            "cannot be split across 4 shards",
        ),
        (
            &[
                "--shards",
                "2",
                "--container-image",
                "q",
                "--base-url",
                "http://x:1",
                "--output-dir",
                "x",
            ][..],
            "sets no --output-dir",
        ),
        (
            &[
                "--shards",
                "2",
                "--container-image",
                "q",
                "--base-url",
                "http://x:1",
                "--name",
                "Bad_Name",
            ][..],
            "a Kubernetes name",
        ),
        (&["--container-image", "q", "--base-url", "http://x:1"][..], "--shards"),
        (&["--shards", "2", "--base-url", "http://x:1"][..], "give the container image"),
        (
            &[
                "--shards",
                "2",
                "--base-url",
                "http://x:1",
                "--modality",
                "vision",
                "--image",
                "a.png",
            ][..],
            "give the container image",
        ),
    ] {
        let o = bin().arg("k8s").args(args).output().unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!t.contains("sk-1"), "{t}");
    }
}
