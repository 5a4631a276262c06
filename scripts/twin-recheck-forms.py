#!/usr/bin/env python3
"""Forms of the recheck, weighed on a table of scripts/twin-compare.py (docs/SIMULATOR.md).

usage: twin-recheck-forms.py TABLE_DIR CALIBRATION_MODEL.json [LOAD_TAG ...]

For each load of the table (closed-c1 ... poisson-90) it predicts the same workload (the
server run's own seed and flags, from its run.json) with the calibration's model rescaled by
that load's recheck in other forms, and prints each form's errors against the server (TTFT
p50, TTFT p90, TPOT p50, E2E p50, output tok/s; "within" where all meet 10 % and 20 % for
the p90): the recheck's two decode factors as the tool wrote them and again recomputed here
(a check of this script: the two rows must agree), one decode factor (the median of the
requests' decode ratios), the sequences' terms rescaled with the context terms as
calibrated, and decode not rescaled at all. Prefill always takes the recheck's factor.
Run it from the repository root; QUETTA_BENCH names the quetta-bench binary
(target/release/quetta-bench unless set).
"""
import csv, json, os, statistics as st, subprocess, sys

from twin_figures import figures
d, cal = sys.argv[1], json.load(open(sys.argv[2]))
loads = sys.argv[3:] or ["closed-c1", "closed-c2", "closed-c4", "closed-c8", "poisson-50", "poisson-90"]
bench = os.environ.get("QUETTA_BENCH", "target/release/quetta-bench")
PRE = ["prefill_token_ms", "prefill_pair_mt_ms", "cached_token_ms", "prefill_step_ms"]
SEQ = ["base_ms", "decode_seq_ms", "multi_seq_ms"]
CTX = ["context_kt_ms", "context_over_kt_ms"]

def figs(s):
    return list(figures(s).values())

def variant(rec, p, sq, cx, path):
    m = json.load(open(rec))
    for k, v in cal["step"].items():
        f = p if k in PRE else sq if k in SEQ else cx if k in CTX else 1.0
        m["step"][k] = v * f if isinstance(v, float) else v
    json.dump(m, open(path, "w"), indent=1)
    return path

for load in loads:
    real_dir = os.path.join(d, f"{load}-real")
    if not os.path.exists(os.path.join(real_dir, "summary.json")):
        continue
    real = figs(json.load(open(os.path.join(real_dir, "summary.json"))))
    cfg = json.load(open(os.path.join(real_dir, "run.json")))["config"]
    rec = os.path.join(d, f"recheck-{load}.json")
    r = json.load(open(rec))["rechecked"]
    p, dd, cc = r["prefill_factor"], r["decode_factor"], r.get("context_factor") or r["decode_factor"]
    ratios = [float(x["decode_ratio"]) for x in csv.DictReader(open(os.path.join(d, f"recheck-{load}", "recheck.csv")))]
    one = st.median(ratios)
    rows = {"two factors (as made)": figs(json.load(open(os.path.join(d, f"{load}-predicted", "summary.json"))))}
    forms = {"two factors (recomputed)": (p, dd, cc), "one factor (median ratio)": (p, one, one), "context as calibrated": (p, dd, 1.0),
             "no decode rescale": (p, 1.0, 1.0)}
    for name, (a, b, c) in forms.items():
        mp = variant(rec, a, b, c, os.path.join(d, "forms-model.json"))
        load_args = (["--concurrency", str(cfg["concurrency"])] if cfg["load"] == "closed"
                     else ["--request-rate", str(cfg["request_rate"]), "--arrival", cfg["arrival"] or "poisson"])
        out = os.path.join(d, "forms-run")
        cmd = [bench, "run", "--sim-model", mp, "--predict", "--tokenizer", cfg["tokenizer"], "--input-len", str(cfg["input_len"]),
               "--output-len", str(cfg["output_len"]), "--input-range-ratio", str(cfg["range_ratio"]),
               "--output-range-ratio", str(cfg["output_range_ratio"]), "--ignore-eos", "--quiet", "--overwrite",
               "--temperature", "0", "--num-requests", str(cfg["num_requests"]), "--seed", str(cfg["seed"]), *load_args, "--output-dir", out]
        subprocess.run(cmd, check=True, capture_output=True)
        rows[name] = figs(json.load(open(os.path.join(out, "summary.json"))))
    print(f"{d} {load}: recheck p x{p:.3f} d x{dd:.3f} c x{cc:.3f} one x{one:.3f}")
    for name, v in rows.items():
        errs = [(a / b - 1) * 100 for a, b in zip(v, real)]
        ok = all(abs(e) <= (20 if i == 1 else 10) for i, e in enumerate(errs))
        print(f"   {name:28s} " + " ".join(f"{e:+6.1f}" for e in errs) + ("  within" if ok else ""))
