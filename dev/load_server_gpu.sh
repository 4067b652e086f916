#!/usr/bin/env bash
# The server's load test on the GPU machine: the 8B Q4_K_M synthetic file through HTTP (dev/load_server.py,
# 1/8/32/64 clients, streaming), then the engine's own batched figure when `oxigpu bench --batch` exists, for
# the ratio issue 24 asks (HTTP aggregate tok/s at 64 clients >= 0.9x bench --batch 64). Writes under $OUT.
#   OUT=/tmp/out bash dev/load_server_gpu.sh                       # REQUESTS=64 MAX_TOKENS=128 by default
#   REQUESTS=16 MAX_TOKENS=32 bash dev/load_server_gpu.sh          # fits 10 minutes on the single-sequence engine
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/oxigpu-load}
MODEL=${MODEL:-/tmp/llama-3.1-8b-q4_k_m.gguf}
REQUESTS=${REQUESTS:-64}
MAX_TOKENS=${MAX_TOKENS:-128}
mkdir -p "$OUT"
[ -f "$MODEL" ] || "$PY" -m oxigpu synth llama-3.1-8b --type Q4_K_M --seed 0 -o "$MODEL" >"$OUT/synth.log" 2>&1
"$PY" dev/load_server.py -m "$MODEL" --backend wgpu --max-seqs 64 --n-ctx 2048 --concurrency 1,8,32,64 \
  --requests "$REQUESTS" --prompt-tokens 128 --max-tokens "$MAX_TOKENS" --json "$OUT/load.json" \
  2>"$OUT/load.log" | tee "$OUT/load.md"
if "$PY" -m oxigpu bench --help | grep -q -- '--batch'; then
  "$PY" -m oxigpu bench -m "$MODEL" --backend wgpu --batch 64 -p 128 -n "$MAX_TOKENS" | tee "$OUT/bench_batch64.txt"
else
  echo "oxigpu bench has no --batch yet: no engine figure to compare with" | tee "$OUT/bench_batch64.txt"
fi
