#!/usr/bin/env python3
"""The twin against the real server it was calibrated on: docs/SIMULATOR.md's table.

usage: twin-compare.py BASE_URL SERVER_MODEL.json TOKENIZER OUT_DIR [N_REQUESTS] [INPUT_LEN OUTPUT_LEN RANGE_RATIO [OUTPUT_RANGE_RATIO]]

(prompts of 128-1,024 tokens with outputs of 64-256: 576 160 0.778 0.6)

For closed loops at concurrency 1, 2, 4 and 8 and Poisson arrivals at 50 % and 90 % of the
capacity measured at concurrency 8, the same workload runs three times: against the server,
against the live twin (quetta-bench run --sim-model, real time) and predicted by the twin
(--predict, virtual clock). Prints a Markdown table of TTFT p50/p90, TPOT p50, E2E p50 and
output throughput with the twin's error against the server.

It keeps itself and the runs it starts off the CPU scripts/llama-server-start.sh pins the server
to (QUETTA_LLAMA_CPU, else the last CPU), as a client on its own machine would be.
"""
import json
import os
import subprocess
import sys
import time

bench = os.environ.get("QUETTA_BENCH", "target/release/quetta-bench")
url, model, tok, out = sys.argv[1:5]
n = sys.argv[5] if len(sys.argv) > 5 else "12"
inp, outp, ratio = (sys.argv[6:9] if len(sys.argv) > 8 else ("256", "128", "0.5"))
out_ratio = sys.argv[9] if len(sys.argv) > 9 else ratio
os.makedirs(out, exist_ok=True)
cpus = os.cpu_count() or 1
server_cpu = os.environ.get("QUETTA_LLAMA_CPU") or (str(cpus - 1) if cpus >= 2 else "none")
if server_cpu != "none":
    os.sched_setaffinity(0, set(range(cpus)) - {int(server_cpu)})

common = ["--tokenizer", tok, "--input-len", inp, "--output-len", outp, "--input-range-ratio", ratio,
          "--output-range-ratio", out_ratio,
          "--ignore-eos", "--drain-timeout", "1200", "--quiet", "--overwrite"]
# Each load its own prompts, none the server has seen (llama.cpp keeps earlier prompts in its
# cache, and a cached prompt's TTFT is not a prefill); the same prompts for the server and the
# twin of one load.
salt = int(time.time()) % 1_000_000
seeds = {}


def run(name, kind, load, requests=None):
    seed = seeds.setdefault(name, str(salt * 100 + len(seeds)))
    d = os.path.join(out, f"{name}-{kind}")
    target = {"real": ["--base-url", url], "live": ["--sim-model", model],
              "predicted": ["--sim-model", model, "--predict"]}[kind]
    cmd = [bench, "run", *target, *common, "--num-requests", requests or n, "--seed", seed, *load,
           "--output-dir", d]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def figures(s):
    m = s if "ttft_ms" in s else s["metrics"]
    return {"TTFT p50": m["ttft_ms"]["p50"], "TTFT p90": m["ttft_ms"]["p90"], "TPOT p50": m["tpot_ms"]["p50"],
            "E2E p50": m["e2e_ms"]["p50"], "output tok/s": m["output_token_throughput"]}


def reference(tag):
    """The server's speed against the twin's: mean E2E of the server over the prediction's,
    on a few closed-1 requests of their own (prompts of their own)."""
    load = ["--concurrency", "1"]
    real = run(f"reference-{tag}", "real", load, "6")
    pred = run(f"reference-{tag}", "predicted", load, "6")
    m = lambda s: (s if "e2e_ms" in s else s["metrics"])["e2e_ms"]["mean"]
    return m(real) / m(pred)


ref_before = reference("before")
rows = []
loads = [(f"closed c={c}", ["--concurrency", str(c)]) for c in (1, 2, 4, 8)]
capacity = None
for name, load in loads:
    got = {k: figures(run(name.replace(" ", "-").replace("=", ""), k, load)) for k in ("real", "live", "predicted")}
    rows.append((name, got))
    if name == "closed c=8":
        with open(os.path.join(out, "closed-c8-real", "summary.json")) as f:
            c8 = json.load(f)
            capacity = c8.get("request_throughput", c8.get("metrics", {}).get("request_throughput"))
for frac in (0.5, 0.9):
    rate = capacity * frac
    load = ["--request-rate", f"{rate:.4f}", "--arrival", "poisson"]
    name = f"Poisson {int(frac * 100)} % ({rate:.3f} req/s)"
    got = {k: figures(run(f"poisson-{int(frac * 100)}", k, load)) for k in ("real", "live", "predicted")}
    rows.append((name, got))

ref_after = reference("after")
print(f"capacity (closed loop at 8, real server): {capacity:.4f} req/s")
print(f"server speed against the twin (closed 1, 6 requests, server mean E2E / predicted): "
      f"before {(ref_before - 1) * 100:+.1f} %, after {(ref_after - 1) * 100:+.1f} %\n")
print("| load | metric | server | live twin | error | predicted | error |")
print("|---|---|---:|---:|---:|---:|---:|")
worst = {}
for name, got in rows:
    for metric, real in got["real"].items():
        cells = []
        for k in ("live", "predicted"):
            v = got[k][metric]
            err = (v - real) / real * 100 if real else float("nan")
            worst[(metric, k)] = max(worst.get((metric, k), 0.0), abs(err))
            cells += [f"{v:.1f}", f"{err:+.1f} %"]
        print(f"| {name} | {metric} | {real:.1f} | " + " | ".join(cells) + " |")
print()
for (metric, k), w in sorted(worst.items()):
    print(f"worst |error| {metric} {k}: {w:.1f} %")
