#!/bin/bash
# On the GPU machine, after `source .gpu/bootstrap.sh`: oxigpu against llama.cpp on an IQ-type file that
# llama.cpp's own llama-quantize writes from an `oxigpu synth` F16 file (oxigpu cannot write IQ types),
# both engines in the same call through `oxigpu bench --compare-llamacpp` (tg128 and pp512, depth 0).
#   bash dev/gpu_iq_bench.sh [TYPE (IQ4_XS)] [SHAPE (llama-3.1-8b)]
# Each call does the steps still missing, so the work fits several 10-minute calls on a warm machine: the
# llama.cpp build (llama-bench, llama-quantize; .gpu/llamacpp.sh, in the background) while the F16 file is
# written, then the quantization, then the comparison (its table in /tmp/iqbench/compare-TYPE/table.md).
# Exit 3: the build is still running (call again). Files live in /tmp/iqbench as long as the machine does.
set -euo pipefail
T=${1:-IQ4_XS}
S=${2:-llama-3.1-8b}
W=/tmp/iqbench
B=/tmp/llamacpp/build/bin
mkdir -p $W
bash .gpu/llamacpp.sh start llama-bench llama-quantize
if [ ! -f $W/$S-F16.gguf ]; then
  python3 -m oxigpu synth $S -o $W/$S-F16.gguf.part --type F16 --seed 0
  mv $W/$S-F16.gguf.part $W/$S-F16.gguf
fi
bash .gpu/llamacpp.sh wait 420 | tee $W/build.txt
grep -q BUILD_OK $W/build.txt || exit 3
# a machine whose build was started for other targets: add the quantizer
[ -x $B/llama-quantize ] || cmake --build /tmp/llamacpp/build -j14 --target llama-quantize >$W/quantize-build.log 2>&1
if [ ! -f $W/$S-$T.gguf ]; then
  $B/llama-quantize $W/$S-F16.gguf $W/$S-$T.gguf.part $T 14 >$W/quantize-$T.log 2>&1
  mv $W/$S-$T.gguf.part $W/$S-$T.gguf
fi
python3 -m oxigpu info $W/$S-$T.gguf | tail -6
python3 -m oxigpu bench --compare-llamacpp $B -m $W/$S-$T.gguf -p 512 -n 128 -d 0 -r 3 --out $W/compare-$T
