#!/bin/bash
# On the GPU machine, after `source .gpu/bootstrap.sh`: oxigpu against llama.cpp on an IQ-type file that
# llama.cpp's own llama-quantize writes from an `oxigpu synth` F16 file (for IQ4_XS, `oxigpu synth --type iq4_xs`
# writes the same mix directly, in seconds),
# both engines in the same call through `oxigpu bench --compare-llamacpp` (tg128 and pp512, depth 0).
#   bash dev/gpu_iq_bench.sh [TYPE (IQ4_XS)] [SHAPE (llama-3.1-8b)]
# Each call does the steps still missing and stops before one that would not finish inside a 10-minute call
# (exit 3: call again), so the work spreads over calls on a warm machine: the llama.cpp build (llama-bench,
# llama-quantize; .gpu/llamacpp.sh, in the background) while the F16 file is written, then the
# quantization, then the comparison (its table printed and in /tmp/iqbench/compare-TYPE/table.md).
set -euo pipefail
T=${1:-IQ4_XS}
S=${2:-llama-3.1-8b}
W=/tmp/iqbench
B=/tmp/llamacpp/build/bin
LIMIT=${LIMIT:-570}          # seconds this call may use
mkdir -p $W
again() { echo "CALL AGAIN: $1 (${SECONDS}s used)"; exit 3; }
bash .gpu/llamacpp.sh start llama-bench llama-quantize
# synth writes FILE.part and renames it when complete (about a minute for the 8B's 16 GB)
[ -f $W/$S-F16.gguf ] || python3 -m oxigpu synth $S -o $W/$S-F16.gguf --type F16 --seed 0
left=$(( LIMIT - SECONDS - 30 ))
[ $left -gt 10 ] || again "the F16 file is written; the llama.cpp build goes on"
bash .gpu/llamacpp.sh wait $left | tee $W/build.txt
grep -q BUILD_OK $W/build.txt || { grep -q BUILD_FAILED $W/build.txt && exit 2; again "llama.cpp is still building"; }
# a machine whose build was started for other targets: add the quantizer
[ -x $B/llama-quantize ] || cmake --build /tmp/llamacpp/build -j14 --target llama-quantize >$W/quantize-build.log 2>&1
if [ ! -f $W/$S-$T.gguf ]; then
  [ $(( LIMIT - SECONDS )) -gt 240 ] || again "the quantization comes next"
  $B/llama-quantize $W/$S-F16.gguf $W/$S-$T.gguf.part $T 14 >$W/quantize-$T.log 2>&1
  mv $W/$S-$T.gguf.part $W/$S-$T.gguf
fi
[ $(( LIMIT - SECONDS )) -gt 240 ] || again "$S-$T.gguf is written; the comparison comes next"
python3 -m oxigpu info $W/$S-$T.gguf | tail -6
python3 -m oxigpu bench --compare-llamacpp $B -m $W/$S-$T.gguf -p 512 -n 128 -d 0 -r 3 --out $W/compare-$T
