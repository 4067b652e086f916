#!/bin/bash
# The round's measurements on the GPU machine, oxigpu and llama.cpp in the same call on the same synthetic
# files, in two phases that each fit a 10-minute call on a warm machine (the llama.cpp build and the files
# in /tmp survive between back-to-back calls). After `source .gpu/bootstrap.sh`, from the project root:
#   OUT=$OUT bash dev/gpu_round.sh profile  # single stream's kernel families, old tree (OLD) beside the new
#   OUT=$OUT bash dev/gpu_round.sh batch    # single stream before/after (OLD=tree of the old commit), batched
#                                          # throughput beside llama-batched-bench
#   OUT=$OUT bash dev/gpu_round.sh serve    # HTTP load test vs bench --batch 64; constrained vs free decoding
#                                          # beside llama-completion; tg/pp of the new shapes beside llama-bench;
#                                          # 64 sequences of 4,096 tokens at once on the 8B (dev/fit_sequences.py)
# Every step has its own time limit and logs under $OUT; a step that fails says so and the next one runs.
set -uo pipefail
PHASE=${1:?profile, batch or serve}
OUT=${OUT:-/tmp/gpu-round}
F=/tmp/cmp
B=/tmp/llamacpp/build/bin
OLD=${OLD:-.wt/old}
mkdir -p "$OUT" $F
step() { local name=$1 limit=$2; shift 2; echo "== $name (${SECONDS}s)"
         timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
         if [ $rc -ne 0 ]; then echo "   $name: exit $rc; the log's tail:"; tail -5 "$OUT/$name.log"; fi; }
synth() { [ -f $F/$1-Q4_K_M.gguf ] || python3 -m oxigpu synth "$1" --type Q4_K_M --seed 0 ${2:+--layers $2} \
            -o $F/$1-Q4_K_M.gguf >>"$OUT/synth.log" 2>&1; }
bash .gpu/llamacpp.sh start llama-bench llama-batched-bench llama-completion llama-quantize

case $PHASE in
profile)
  # where single stream lost against the old tree: each kernel family's share of a prefill chunk and a
  # decode step, both trees on the same file
  synth qwen2.5-0.5b
  step profile-old 120 bash -c "cd $OLD && PYTHONPATH=\$PWD:/tmp/site python3 -m oxigpu bench -m $F/qwen2.5-0.5b-Q4_K_M.gguf -p 512 -n 128 -r 2 --backend wgpu --profile"
  step profile-new 120 python3 -m oxigpu bench -m $F/qwen2.5-0.5b-Q4_K_M.gguf -p 512 -n 128 -r 2 --backend wgpu --profile
  grep -v "^loading" "$OUT/profile-old.log"; echo; grep -v "^loading" "$OUT/profile-new.log"
  ;;
batch)
  for s in qwen2.5-0.5b llama-3.2-1b llama-3.1-8b; do synth $s; done
  # single stream, the old tree then the new one, alternated twice, same file
  for m in qwen2.5-0.5b llama-3.1-8b; do
    for i in 1 2; do
      step "ab-old-$m-$i" 150 bash -c "cd $OLD && PYTHONPATH=\$PWD:/tmp/site python3 -m oxigpu bench -m $F/$m-Q4_K_M.gguf -p 512 -n 128 -r 3 --backend wgpu --json"
      step "ab-new-$m-$i" 150 python3 -m oxigpu bench -m $F/$m-Q4_K_M.gguf -p 512 -n 128 -r 3 --backend wgpu --json
    done
  done
  for m in llama-3.2-1b llama-3.1-8b; do
    step "batch-oxigpu-$m" 200 python3 -m oxigpu bench -m $F/$m-Q4_K_M.gguf --batch 1,4,16,64 -p 512 -n 128 --backend wgpu
  done
  bash .gpu/llamacpp.sh wait 200 | tee "$OUT/llama-build.txt" | head -1
  for m in llama-3.2-1b llama-3.1-8b; do
    step "batch-llama-$m" 150 $B/llama-batched-bench -m $F/$m-Q4_K_M.gguf -npp 512 -ntg 128 -npl 1,4,16,64 \
      -c 41000 -b 2048 -ub 512 -ngl 99 -fa 1
  done
  python3 - "$OUT" <<'EOF'
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
def j(name):
    try:
        t = (out / f"{name}.log").read_text(); return json.loads(t[t.index("{"):t.rindex("}") + 1])
    except Exception as e:
        return None
print("\n| model | test | old tok/s | new tok/s | new/old |\n|---|---|---|---|---|")
for m in ("qwen2.5-0.5b", "llama-3.1-8b"):
    for test in ("pp512", "tg128"):
        vals = {}
        for side in ("old", "new"):
            xs = []
            for i in (1, 2):
                d = j(f"ab-{side}-{m}-{i}") or {}
                r = d.get("pp") if test == "pp512" else (d.get("tg") or [None])[0]
                if r:
                    xs.append(r["tokens_per_s"])
            vals[side] = max(xs) if xs else 0
        ratio = vals["new"] / vals["old"] if vals["old"] else float("nan")
        print(f"| {m} | {test} | {vals['old']:,.0f} | {vals['new']:,.0f} | {ratio:.3f} |")
for m in ("llama-3.2-1b", "llama-3.1-8b"):
    for side in ("oxigpu", "llama"):
        p = out / f"batch-{side}-{m}.log"
        lines = [l for l in p.read_text().splitlines() if l.startswith("|")] if p.exists() else []
        print(f"\n{side} {m}\n" + "\n".join(lines[-6:]))
EOF
  ;;
serve)
  synth llama-3.1-8b; synth llama-3.2-1b; synth smollm2-135m; synth qwen3moe-30b-a3b 24
  bash .gpu/llamacpp.sh wait 300 | head -1
  step load-server 330 env OUT="$OUT/load" PY=python3 MODEL=$F/llama-3.1-8b-Q4_K_M.gguf bash dev/load_server_gpu.sh
  step fit-64x4096 240 python3 dev/fit_sequences.py -m $F/llama-3.1-8b-Q4_K_M.gguf --seqs 64 --ctx 4096
  tail -3 "$OUT/fit-64x4096.log"
  step constrained 300 python3 dev/bench_constrained.py --llama-bin $B --out "$OUT/constrained" --files $F \
    --shapes llama-3.2-1b,llama-3.1-8b
  step compare-new-shapes 300 python3 -m oxigpu bench --compare-llamacpp $B --files $F -d 0 -r 3 --backend wgpu \
    --rows smollm2-135m:Q4_K_M,qwen3moe-30b-a3b:Q4_K_M --out "$OUT/compare-new"
  cat "$OUT/load/load.md" "$OUT/load/bench_batch64.txt" "$OUT/constrained/table.md" "$OUT/compare-new/table.md" \
    2>/dev/null
  ;;
esac
echo "== done (${SECONDS}s)"
