#!/usr/bin/env bash
# Speculative decoding on the GPU machine: `oxigpu bench -md` / `--lookup` (speculative against plain greedy
# decoding, 21 code prompts, the same loaded model) and llama.cpp's llama-server doing the same on the same
# prompts (its draft model and ngram-simple lookup), reporting tokens/s, speed-up and acceptance.
#
# The real Qwen pair cannot travel to the device machine (64 MiB), so by default the files are synthesized:
# target llama-3.1-8b Q4_K_M and draft llama-3.2-1b Q4_K_M (the same vocabulary). Random weights make the
# acceptance rates meaningless as quality figures: what this measures is the machinery (verification and
# drafting cost per round); the ORACLE run (the draft model drafting for itself: every draft accepted) gives
# the speed-up at acceptance 1, the draft run at whatever the random weights agree on (about 0).
# Set TARGET=... DRAFT=... to real files where they exist.
#
# On the device machine (carry .gpu):
#   source .gpu/bootstrap.sh
#   bash dev/bench_speculative.sh build        # llama-server with CUDA, detached (~5 min); optional
#   bash dev/bench_speculative.sh run          # oxigpu's three runs, then llama.cpp's if it was built
# Env: TARGET, DRAFT (files), N (tokens per prompt, 128), K (drafts per round, 5), PROMPTS (1..21),
# OUT (results folder), PY.
set -u -o pipefail
PY=${PY:-python3}
OUT=${OUT:-/tmp/spec-out}
W=/tmp/llamacpp-spec
N=${N:-128}; K=${K:-5}; PROMPTS=${PROMPTS:-21}
TARGET=${TARGET:-/tmp/spec-target.gguf}; DRAFT=${DRAFT:-/tmp/spec-draft.gguf}
mkdir -p "$OUT"

case "${1:-run}" in
build)
  mkdir -p $W; [ -f $W/started ] && exit 0; touch $W/started; src=$PWD/.gpu/llama.tar.xz
  setsid nohup bash -c "cd $W && tar xJf $src && cmake -S llama.cpp -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release >cmake.log 2>&1 && cmake --build build -j14 --target llama-server \
    >build.log 2>&1 && echo BUILD_OK >status || { echo BUILD_FAILED >status; tail -30 cmake.log build.log >>status; }" \
    >/dev/null 2>&1 </dev/null &
  exit 0 ;;
run) ;;
*) echo "usage: $0 build|run"; exit 2 ;;
esac

[ -f "$TARGET" ] || $PY -m oxigpu synth llama-3.1-8b --type Q4_K_M -o "$TARGET" >/dev/null || exit 1
[ -f "$DRAFT" ] || $PY -m oxigpu synth llama-3.2-1b --type Q4_K_M -o "$DRAFT" >/dev/null || exit 1

bench() {   # NAME ARGS...: one oxigpu speculative bench, markdown to stdout, JSON kept
  local name=$1; shift
  echo "=== oxigpu $name"
  $PY -m oxigpu bench --backend wgpu -n "$N" --prompts "$PROMPTS" --json "$@" > "$OUT/$name.json" 2> "$OUT/$name.log" \
    || { echo "FAILED"; tail -5 "$OUT/$name.log"; return; }
  $PY - "$OUT/$name.json" <<'EOF'
import json, sys
from oxigpu.tools.spec_bench import to_markdown
print(to_markdown(json.load(open(sys.argv[1]))).splitlines()[-1])
EOF
}
bench draft -m "$TARGET" -md "$DRAFT" --draft-max "$K" --dump-prompts "$OUT/prompts"
bench lookup -m "$TARGET" --lookup --draft-max "$K"
bench oracle -m "$DRAFT" -md "$DRAFT" --draft-max "$K"

SERVER=$W/build/bin/llama-server
if [ ! -x "$SERVER" ]; then
  [ -f $W/started ] && { end=$(( $(date +%s) + 420 )); while [ ! -s $W/status ] && [ $(date +%s) -lt $end ]; do sleep 5; done; }
  [ -x "$SERVER" ] || { echo "llama-server not built (bash $0 build first): llama.cpp skipped"; cat $W/status 2>/dev/null; exit 0; }
fi

llama() {   # NAME MODEL ARGS...: llama-server on port 8181, the dumped prompts, greedy, N tokens each
  local name=$1 model=$2; shift 2
  echo "=== llama.cpp $name"
  "$SERVER" -m "$model" -ngl 99 -c 4096 -np 1 --port 8181 "$@" > "$OUT/llama-$name.log" 2>&1 &
  local pid=$!
  $PY - "$OUT/prompts" "$N" <<'EOF'
import json, pathlib, sys, time, urllib.request
folder, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
url = "http://127.0.0.1:8181"
for _ in range(300):
    try:
        urllib.request.urlopen(url + "/health", timeout=2)
        break
    except Exception:
        time.sleep(1)
def complete(text):
    body = json.dumps({"prompt": text, "n_predict": n, "temperature": 0, "top_k": 1, "cache_prompt": False,
                       "ignore_eos": False}).encode()
    req = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))
prompts = sorted(folder.glob("prompt*.txt"))
complete(prompts[0].read_text())       # warm-up
tok = sec = dn = da = 0
for p in prompts:
    t = complete(p.read_text())["timings"]
    tok += t["predicted_n"]; sec += t["predicted_ms"] / 1000
    dn += t.get("draft_n", 0); da += t.get("draft_n_accepted", 0)
print(f"{len(prompts)} prompts: {tok / sec:.1f} tok/s, drafts accepted {da}/{dn}"
      + (f" ({100 * da / dn:.1f} %)" if dn else ""))
EOF
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
}
llama plain "$TARGET"
llama draft "$TARGET" -md "$DRAFT" -ngld 99 --spec-draft-n-max "$K"
llama lookup "$TARGET" --spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m "$K"
llama oracle "$DRAFT" -md "$DRAFT" -ngld 99 --spec-draft-n-max "$K"
