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
  # the same with the server's context: plans sized for n_ctx 2048 (the batched attention splits by it)
  "$PY" -m oxigpu bench -m "$MODEL" --backend wgpu --batch 64 -p 128 -n "$MAX_TOKENS" --n-ctx 2048 \
    | tee "$OUT/bench_batch64_ctx.txt"
else
  echo "oxigpu bench has no --batch yet: no engine figure to compare with" | tee "$OUT/bench_batch64.txt"
  exit 0
fi
# HTTP at 64 clients against the engine alone on the same workload: the all-decoding phase against bench's
# S_TG, and generated tokens over the whole wall time (prefill included) against bench's B*TG / T
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
http = next(r for r in json.load(open(f"{out}/load.json")) if r["concurrency"] == 64)
def row(name):
    r = [l for l in open(f"{out}/{name}") if l.startswith("|") and l.split("|")[3].strip() == "64"][-1]
    c = [x.strip() for x in r.strip().strip("|").split("|")]
    return int(c[1]), int(c[2]), float(c[7]), float(c[8])
tg, b, s_tg, t = row("bench_batch64.txt")
s_ctx = row("bench_batch64_ctx.txt")[2]
print(f"\n64 clients through HTTP vs `oxigpu bench --batch 64`: all decoding {http['decode_tok_per_s']:,.0f} vs "
      f"S_TG {s_tg:,.0f} tok/s ({http['decode_tok_per_s'] / s_tg:.2f}x; at the server's n_ctx 2048, {s_ctx:,.0f}: "
      f"{http['decode_tok_per_s'] / s_ctx:.2f}x); whole run {http['tok_per_s']:,.0f} vs "
      f"{b * tg / t:,.0f} generated tok/s ({http['tok_per_s'] / (b * tg / t):.2f}x)")
PYEOF
