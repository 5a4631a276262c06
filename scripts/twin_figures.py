"""The five figures the twin is held to (docs/SIMULATOR.md, Accuracy), read from a run's
summary.json (or its `metrics` object): the one reading shared by twin-compare.py and
twin-recheck-forms.py."""

NAMES = ("TTFT p50", "TTFT p90", "TPOT p50", "E2E p50", "output tok/s")


def figures(s):
    m = s if "ttft_ms" in s else s["metrics"]
    return dict(zip(NAMES, (m["ttft_ms"]["p50"], m["ttft_ms"]["p90"], m["tpot_ms"]["p50"],
                            m["e2e_ms"]["p50"], m["output_token_throughput"])))
