#!/usr/bin/env python3
"""The twin against the real server it was calibrated on: docs/SIMULATOR.md's table.

usage: twin-compare.py BASE_URL SERVER_MODEL.json TOKENIZER OUT_DIR [N_REQUESTS] [INPUT_LEN OUTPUT_LEN RANGE_RATIO [OUTPUT_RANGE_RATIO]]

(prompts of 128-1,024 tokens with outputs of 64-256: 576 160 0.778 0.6)

For closed loops at concurrency 1, 2, 4 and 8 and Poisson arrivals at 50 % and 90 % of the
capacity measured at concurrency 8: first `quetta-probe recheck` rescales the model to the
server's speed of that moment (six lone requests of 128 and 768 words, 48 tokens out), then the same workload runs against the
server, a second recheck says how far the server's speed moved during it, then against the live rechecked twin (quetta-bench run --sim-model, real time), predicted
by the rechecked twin (--predict, virtual clock) and predicted by the calibration's model as
it is. Prints the recheck factors and a Markdown table of TTFT p50/p90, TPOT p50, E2E p50
and output throughput with each twin's error against the server.

The workload decodes greedily (`--temperature 0`), as the calibration's probes do;
QUETTA_TWIN_SAMPLING=server leaves sampling to the server's defaults.

QUETTA_TWIN_NO_LIVE (tags, as QUETTA_TWIN_LOADS) skips those loads' live twin runs.
A load's first recheck is made again, up to QUETTA_TWIN_RECHECK_TRIES times in all (3 unless
set), while it warns that the server's speed moved during it (the last one is kept).

QUETTA_TWIN_LOADS (comma-separated tags: closed-c1, closed-c2, closed-c4, closed-c8, poisson-50,
poisson-90) runs only those loads; the Poisson loads then need QUETTA_TWIN_CAPACITY (req/s) unless
closed-c8 runs too.

It keeps itself and the runs it starts off the CPU scripts/llama-server-start.sh pins the server
to (QUETTA_LLAMA_CPU, else the last CPU), as a client on its own machine would be.
"""
import json
import os
import subprocess
import sys
import time

from twin_figures import figures

bench = os.environ.get("QUETTA_BENCH", "target/release/quetta-bench")
probe = os.environ.get("QUETTA_PROBE", os.path.join(os.path.dirname(bench), "quetta-probe"))
url, model, tok, out = sys.argv[1:5]
n = sys.argv[5] if len(sys.argv) > 5 else "12"
inp, outp, ratio = (sys.argv[6:9] if len(sys.argv) > 8 else ("256", "128", "0.5"))
out_ratio = sys.argv[9] if len(sys.argv) > 9 else ratio
os.makedirs(out, exist_ok=True)
cpus = os.cpu_count() or 1
server_cpu = os.environ.get("QUETTA_LLAMA_CPU") or (str(cpus - 1) if cpus >= 2 else "none")
if server_cpu != "none":
    os.sched_setaffinity(0, set(range(cpus)) - {int(server_cpu)})

# The calibration's probes decode greedily, and so does the workload: one difference fewer
# between what the model saw and what it predicts. QUETTA_TWIN_SAMPLING=server leaves sampling
# to the server's defaults (the tables of docs/SIMULATOR.md before 18:01 on 2026-12-05).
sampling = [] if os.environ.get("QUETTA_TWIN_SAMPLING") == "server" else ["--temperature", "0"]
common = ["--tokenizer", tok, "--input-len", inp, "--output-len", outp, "--input-range-ratio", ratio,
          "--output-range-ratio", out_ratio,
          "--ignore-eos", "--drain-timeout", "1200", "--quiet", "--overwrite", *sampling]
# Each load its own prompts, none the server has seen (llama.cpp keeps earlier prompts in its
# cache, and a cached prompt's TTFT is not a prefill); the same prompts for the server and the
# twin of one load.
# The rechecks' prompts span the workload's (about 170 and 1,000 tokens with the template,
# against 128-1,024), so the context factor is measured where the loads decode, and over
# twice the span of the default 128,512 words; 48 tokens out, as the calibration's decode.
# QUETTA_TWIN_RECHECK=default keeps quetta-probe recheck's defaults (the tables before
# the night of 2026-12-05).
recheck_span = ([] if os.environ.get("QUETTA_TWIN_RECHECK") == "default"
                else ["--prompt-words", "128,768", "--decode-tokens", "48"])
salt = int(time.time()) % 1_000_000
seeds = {}


def run(name, kind, load, requests=None, sim_model=None):
    seed = seeds.setdefault(name, str(salt * 100 + len(seeds)))
    d = os.path.join(out, f"{name}-{kind}")
    m = sim_model or model
    target = {"real": ["--base-url", url], "live": ["--sim-model", m],
              "predicted": ["--sim-model", m, "--predict"],
              "calibration": ["--sim-model", model, "--predict"]}[kind]
    cmd = [bench, "run", *target, *common, "--num-requests", requests or n, "--seed", seed, *load,
           "--output-dir", d]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def recheck(name, tries=1):
    """The model rescaled to the server's speed now (quetta-probe recheck): its path and factors.

    With tries > 1 a recheck that warns the server's speed moved while it ran is made again,
    as its warning tells a user to, up to `tries` times; the last one is kept."""
    m = os.path.join(out, f"recheck-{name}.json")
    cmd = [probe, "recheck", "--base-url", url, "--server-model", model, *recheck_span,
           "--output-dir", os.path.join(out, f"recheck-{name}"), "-o", m]
    for attempt in range(1, tries + 1):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
        # the recheck's doubts (another model, shape, noise), from its typed meta file
        with open(os.path.join(out, f"recheck-{name}", "recheck.meta.json")) as f:
            warnings = json.load(f)["summary"]["warnings"]
        for w in warnings:
            print(f"[{time.strftime('%H:%M:%S')}] {name} (recheck {attempt}): recheck warning: {w}",
                  file=sys.stderr, flush=True)
        if not any("speed moved" in w for w in warnings):
            break
    with open(m) as f:
        re = json.load(f)["rechecked"]
    return m, re["prefill_factor"], re["decode_factor"], re.get("context_factor", re["decode_factor"])


rows = []
factors = []
loads = [(f"closed c={c}", ["--concurrency", str(c)]) for c in (1, 2, 4, 8)]
kinds = ("real", "live", "predicted", "calibration")


def measure(name, tag, load):
    m, pf, df, cf = recheck(tag, tries=int(os.environ.get("QUETTA_TWIN_RECHECK_TRIES", "3")))
    got = {"real": figures(run(tag, "real", load))}
    # the server again right after its load: how far its speed moved while the load ran (the
    # twin keeps the factors of before; a drift beside an error says whose error it is)
    _, pa, da, ca = recheck(f"{tag}-after")
    factors.append((name, pf, df, cf, pa, da, ca))
    for k in kinds[1:]:
        # QUETTA_TWIN_NO_LIVE (tags) skips a load's live run, which takes as long as the server's
        # (live and predicted of one model agree to a fraction of a per cent: docs/SIMULATOR.md)
        if k == "live" and tag in os.environ.get("QUETTA_TWIN_NO_LIVE", "").split(","):
            continue
        got[k] = figures(run(tag, k, load, sim_model=m))
    rows.append((name, got))
    # as it goes, for a table that takes an hour
    errs = {k: {metric: (got[k][metric] / real - 1) * 100 for metric, real in got["real"].items()}
            for k in kinds[1:] if k in got}
    print(f"[{time.strftime('%H:%M:%S')}] {name}: recheck prefill x{pf:.3f} decode x{df:.3f} context x{cf:.3f} "
          f"(after the load x{pa:.3f}, x{da:.3f}, x{ca:.3f}); "
          + "; ".join(f"{k} " + ", ".join(f"{mm} {e:+.1f}%" for mm, e in v.items()) for k, v in errs.items()),
          file=sys.stderr, flush=True)


only = [t for t in os.environ.get("QUETTA_TWIN_LOADS", "").split(",") if t]
capacity = float(os.environ["QUETTA_TWIN_CAPACITY"]) if os.environ.get("QUETTA_TWIN_CAPACITY") else None
for name, load in loads:
    tag = name.replace(" ", "-").replace("=", "")
    if only and tag not in only:
        continue
    measure(name, tag, load)
    if name == "closed c=8":
        with open(os.path.join(out, "closed-c8-real", "summary.json")) as f:
            c8 = json.load(f)
            capacity = c8.get("request_throughput", c8.get("metrics", {}).get("request_throughput"))
for frac in (0.5, 0.9):
    if only and f"poisson-{int(frac * 100)}" not in only:
        continue
    if capacity is None:
        sys.exit("the Poisson loads need the capacity: run closed-c8 too or set QUETTA_TWIN_CAPACITY")
    rate = capacity * frac
    load = ["--request-rate", f"{rate:.4f}", "--arrival", "poisson"]
    measure(f"Poisson {int(frac * 100)} % ({rate:.3f} req/s)", f"poisson-{int(frac * 100)}", load)

if capacity is not None:
    print(f"capacity (closed loop at 8, real server): {capacity:.4f} req/s")
print("the server against the calibration before and after each load (quetta-probe recheck, 6 lone requests;")
print("the twin runs at the factors of before):")
for name, pf, df, cf, pa, da, ca in factors:
    print(f"  {name}: prefill x{pf:.3f} -> x{pa:.3f} ({(pa / pf - 1) * 100:+.0f} %), "
          f"decode x{df:.3f} -> x{da:.3f} ({(da / df - 1) * 100:+.0f} %), "
          f"decode context x{cf:.3f} -> x{ca:.3f} ({(ca / cf - 1) * 100:+.0f} %)")
print()
print("| load | metric | server | live, rechecked | error | predicted, rechecked | error | predicted, calibration | error |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
worst = {}
for name, got in rows:
    for metric, real in got["real"].items():
        cells = []
        for k in ("live", "predicted", "calibration"):
            if k not in got:
                cells += ["—", "—"]
                continue
            v = got[k][metric]
            err = (v - real) / real * 100 if real else float("nan")
            worst[(metric, k)] = max(worst.get((metric, k), 0.0), abs(err))
            cells += [f"{v:.1f}", f"{err:+.1f} %"]
        print(f"| {name} | {metric} | {real:.1f} | " + " | ".join(cells) + " |")
print()
for (metric, k), w in sorted(worst.items()):
    print(f"worst |error| {metric} {k}: {w:.1f} %")
