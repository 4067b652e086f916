#!/usr/bin/env bash
# Load-time matrix on the GPU machine: dev/bench_load.py in fresh processes, each on a cold NVIDIA shader
# disk cache (an empty folder) or a warm one (the folder the cold run before it filled), for several
# kernel-building (--threads) settings; then `oxigpu bench`'s own load
# figure with the defaults on a cold cache. One JSON line per run in $OUT/load.jsonl (with the cache
# folder's size after the run: a cold run must fill it, a warm one must not grow it).
#
#   bash dev/bench_load.sh MODEL [N_CTX]
#
# RUNS overrides the matrix: "cache:threads ..." where cache names a folder (a new name is a cold run, a
# repeated one a warm run).
set -u -o pipefail
MODEL=$1
N_CTX=${2:-4225}
OUT=${OUT:-/tmp/bench_load}
RUNS=${RUNS:-"a:0 a:0 b:8 b:8"}
PY=${PY:-python3}
CACHES=$(mktemp -d)
mkdir -p "$OUT"
for run in $RUNS; do
    IFS=: read -r cache threads <<<"$run"
    dir=$CACHES/$cache
    state=$([ -d "$dir" ] && echo warm || echo cold)
    mkdir -p "$dir"
    line=$(__GL_SHADER_DISK_CACHE_PATH=$dir XDG_CACHE_HOME=$dir timeout 60 \
           "$PY" dev/bench_load.py "$MODEL" --n-ctx "$N_CTX" --threads "$threads" \
           2>>"$OUT/stderr.log")
    echo "{\"cache\": \"$state\", \"cache_kib\": $(du -sk "$dir" | cut -f1), \"run\": ${line:-null}}" | tee -a "$OUT/load.jsonl"
done
dir=$CACHES/bench
mkdir -p "$dir"
__GL_SHADER_DISK_CACHE_PATH=$dir XDG_CACHE_HOME=$dir timeout 90 "$PY" -m oxigpu bench -m "$MODEL" -p 0 -n 16 \
    --reps 1 --n-ctx "$N_CTX" --backend wgpu --json 2>>"$OUT/stderr.log" | tee "$OUT/bench_cold.json" | grep load_s
rm -rf "$CACHES"
