#!/bin/bash
# The mixture-of-experts measurements on the GPU machine (issue 26.6), in two phases that each fit a 10-minute
# call on a warm machine. After `source .gpu/bootstrap.sh`, from the project root (OLD: a tree of the commit
# before the MoE rework, e.g. `mkdir -p .wt/old && git archive <main before the merge> oxigpu | tar -x -C
# .wt/old`; its steps are skipped if absent):
#   OUT=$OUT bash dev/gpu_moe.sh check   # correctness on the GPU's paths (integer dots, matrix units, Dawn):
#                                       # the MoE kernel checks (moe_route: norm + router + gate), the decode
#                                       # attention with q/k norms, the dense matmul checks, the MoE tests; the
#                                       # MoE nodes old and new (bench_moe.py)
#   OUT=$OUT bash dev/gpu_moe.sh bench   # tg128/pp512 beside llama-bench on the same file (24 of 48 layers),
#                                       # a --profile of the new tree, a dense single-stream guard (old, new)
#   OUT=$OUT bash dev/gpu_moe.sh quick   # one short call: the MoE and rope_kv_attention kernel checks, the
#                                       # decode MoE nodes (down GEMV split variants), tg128/pp512 beside
#                                       # llama-bench and the --profile
set -uo pipefail
PHASE=${1:?check, bench or quick}
OUT=${OUT:-/tmp/gpu-moe}
F=/tmp/cmp
B=${B:-/tmp/llamacpp/build/bin}
OLD=${OLD:-.wt/old}
mkdir -p "$OUT" $F
step() { local name=$1 limit=$2; shift 2; echo "== $name (${SECONDS}s)"
         timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
         if [ $rc -ne 0 ]; then echo "   $name: exit $rc; the log's tail:"; fi; tail -4 "$OUT/$name.log"; }
synth() { [ -f $F/$1-Q4_K_M.gguf ] || python3 -m oxigpu synth "$1" --type Q4_K_M --seed 0 ${2:+--layers $2} \
            -o $F/$1-Q4_K_M.gguf >>"$OUT/synth.log" 2>&1; }
[ -f .gpu/llamacpp.sh ] && bash .gpu/llamacpp.sh start llama-bench
synth qwen3moe-30b-a3b 24; [ "$PHASE" = quick ] || synth qwen2.5-0.5b
case $PHASE in
check)
step kernels-moe 120 python3 -m oxigpu kernels --filter matmul_id
step kernels-moe-all 120 python3 -m oxigpu kernels --filter moe
step kernels-rope-attn 180 python3 -m oxigpu kernels --filter rope_kv_attention   # q/k norms fused in
step kernels-matmul 240 python3 -m oxigpu kernels --filter matmul
step tests-moe 240 python3 -m pytest -q -x tests/test_kernel_moe.py tests/test_kernel_models.py \
  "tests/test_architectures.py::test_wgpu_matches_numpy[tiny-qwen3moe]" tests/test_fuse.py -k "moe or matmul_id or qwen3moe"
step nodes-new 120 python3 dev/bench_moe.py --tokens 1,512 --json "$OUT/nodes-new.json"
[ -d "$OLD/oxigpu" ] && step nodes-old 180 env PYTHONPATH="$PWD/$OLD" python3 dev/bench_moe.py --tokens 1,512 \
  --json "$OUT/nodes-old.json"
;;
bench)
[ -f .gpu/llamacpp.sh ] && bash .gpu/llamacpp.sh wait 240 | head -1
step compare-moe 300 python3 -m oxigpu bench --compare-llamacpp $B --files $F -d 0 -r 3 --backend wgpu \
  --rows qwen3moe-30b-a3b:Q4_K_M --out "$OUT/compare-moe"
cat "$OUT/compare-moe/table.md" 2>/dev/null
step profile-moe 200 python3 -m oxigpu bench -m $F/qwen3moe-30b-a3b-Q4_K_M.gguf -p 512 -n 128 -r 1 --profile --backend wgpu
[ -d "$OLD/oxigpu" ] && step dense-old 120 bash -c "cd $OLD && PYTHONPATH=\$PWD:/tmp/site python3 -m oxigpu bench \
  -m $F/qwen2.5-0.5b-Q4_K_M.gguf -p 512 -n 128 -r 3 --backend wgpu --json"
step dense-new 120 python3 -m oxigpu bench -m $F/qwen2.5-0.5b-Q4_K_M.gguf -p 512 -n 128 -r 3 --backend wgpu --json
;;
quick)
[ -f .gpu/llamacpp.sh ] && bash .gpu/llamacpp.sh wait 240 | head -1
step kernels-moe-all 120 python3 -m oxigpu kernels --filter moe
step kernels-rope-attn 180 python3 -m oxigpu kernels --filter rope_kv_attention
step nodes-new 120 python3 dev/bench_moe.py --tokens 1 --json "$OUT/nodes-new.json"
cat "$OUT/nodes-new.log"
step compare-moe 300 python3 -m oxigpu bench --compare-llamacpp $B --files $F -d 0 -r 3 --backend wgpu \
  --rows qwen3moe-30b-a3b:Q4_K_M --out "$OUT/compare-moe"
cat "$OUT/compare-moe/table.md" 2>/dev/null
step profile-moe 200 python3 -m oxigpu bench -m $F/qwen3moe-30b-a3b-Q4_K_M.gguf -p 512 -n 128 -r 1 --profile --backend wgpu
;;
esac
echo "== done (${SECONDS}s)"
