//! Every output file keeps its shape: a fixed-seed run, a sweep and a comparison against the
//! embedded simulator, each file reduced to its skeleton (every key in the order the file
//! has it, each value's JSON type, and the values that are not measurements: settings,
//! counts, names, schema versions) and compared with the golden copies in
//! `fixtures/golden/`. `QUETTA_BLESS=1` writes them anew (review the diff: a changed
//! skeleton is a changed file format).

mod common;

use std::path::Path;

use common::tmpdir;
use quetta::report::RunDir;
use quetta::{Benchmark, CompareOptions, Load, Sweep, WorkloadSpec};
use serde_json::{Map, Value};

/// Values kept as they are (by their path's last key, or a prefix): what the run was asked
/// and what it counted, not what it measured.
fn kept(path: &str) -> bool {
    const KEYS: [&str; 14] = [
        "schema_version",
        "tool",
        "partial",
        "planned",
        "dispatched",
        "completed",
        "failed",
        "sent",
        "token_count_source",
        "total_output_tokens",
        "total_input_tokens",
        "kind",
        "input_tokens",
        "output_tokens",
    ];
    let last = path.rsplit('.').next().unwrap_or(path);
    // set by the machine, not the run: the time, the version, the simulator's free port
    let measured_setting =
        ["started_at", "tool_version", "base_url"].iter().any(|k| path.ends_with(k));
    !measured_setting
        && (KEYS.contains(&last) || path.starts_with("config.") || path.starts_with("target."))
}

/// JSON text read with every object's keys in the text's order: each key is written
/// `NNN key`, NNN its place in its object, so the skeleton (a sorted map) keeps the order.
struct Ordered(Value);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OrderedVisitor).map(Ordered)
    }
}

struct OrderedVisitor;

impl<'de> serde::de::Visitor<'de> for OrderedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Ordered(v)) = a.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((k, Ordered(v))) = a.next_entry::<String, Ordered>()? {
            out.insert(format!("{:03} {k}", out.len()), v);
        }
        Ok(Value::Object(out))
    }
}

fn ordered(text: &str) -> Value {
    serde_json::from_str::<Ordered>(text).unwrap().0
}

fn json(p: &Path) -> Value {
    ordered(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn first_line(p: &Path) -> Value {
    ordered(std::fs::read_to_string(p).unwrap().lines().next().unwrap())
}

/// The skeleton of `v`: objects keep every key (in order), arrays their first item (or, for
/// what a run found, their type), scalars their value where [`kept`] else their type.
fn skeleton(v: &Value, path: &str) -> Value {
    let ty = |t: &str| Value::String(format!("<{t}>"));
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                let name = k.split_once(' ').map_or(k.as_str(), |(_, n)| n);
                let p = if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
                out.insert(k.clone(), skeleton(x, &p));
            }
            Value::Object(out)
        }
        // what a run found (notes, regressions, warnings) may be there or not: its type only
        Value::Array(_)
            if ["notes", "regressions", "warnings"].iter().any(|k| path.ends_with(k)) =>
        {
            ty("array")
        }
        Value::Array(a) => Value::Array(a.first().map(|x| skeleton(x, path)).into_iter().collect()),
        _ if kept(path) => v.clone(),
        Value::Null => ty("null"),
        Value::Bool(_) => ty("bool"),
        Value::Number(_) => ty("number"),
        Value::String(_) => ty("string"),
    }
}

fn check(name: &str, v: &Value) {
    let got = serde_json::to_string_pretty(&skeleton(v, "")).unwrap() + "\n";
    let path = common::fixtures().join("golden").join(format!("{name}.json"));
    if std::env::var_os("QUETTA_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (QUETTA_BLESS=1 writes it)", path.display()));
    assert_eq!(got, want, "{name}: its skeleton changed (fixtures/golden/{name}.json)");
}

fn run(dir: &Path) {
    Benchmark::new(common::sim(20, 5))
        .workload(WorkloadSpec::synthetic(16, 8))
        .load(Load::closed(2))
        .requests(6)
        .output_dir(dir)
        .run_blocking()
        .unwrap();
}

#[test]
fn every_output_file_keeps_its_shape() {
    let (a, b, sw) = (tmpdir("golden-a"), tmpdir("golden-b"), tmpdir("golden-sweep"));
    run(&a);
    run(&b);
    for f in ["run.json", "summary.json"] {
        check(&f.replace(".json", ""), &json(&a.join(f)));
    }
    check("requests.jsonl", &first_line(&a.join("requests.jsonl")));
    check("timeseries.jsonl", &first_line(&a.join("timeseries.jsonl")));
    let base = Benchmark::new(common::sim(20, 5))
        .workload(WorkloadSpec::synthetic(16, 8))
        .requests(4)
        .output_dir(&sw);
    Sweep::concurrencies(base, vec![1, 2]).run_blocking().unwrap();
    check("sweep", &json(&sw.join("sweep.json")));
    let opts = CompareOptions::default();
    let r = quetta::compare(&RunDir::open(&a).unwrap(), &RunDir::open(&b).unwrap(), &opts).unwrap();
    check("compare", &ordered(&serde_json::to_string(&r).unwrap()));
    for d in [a, b, sw] {
        let _ = std::fs::remove_dir_all(d);
    }
}
