#!/usr/bin/env bash
# Whole-model A/B on the GPU machine: `oxigpu bench` of the working tree against another version of the
# package (or the same tree under other environment variables), the two sides alternated ROUNDS times per
# row so clock and thermal drift hit both alike. Prints one line per side and round: median tokens/s of pp
# and tg, and the runs.
#
# The device machine has no git history: put the other version's package in an ignored folder first,
#   rm -rf .wt/old && mkdir -p .wt/old && git archive <REV> oxigpu | tar -x -C .wt/old
# then, on the device machine (carry .gpu, .gl and .wt/old):
#   for f in .gl/*.deb; do dpkg -x $f /; done; source .gpu/bootstrap.sh
#   export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
#   ROWS="llama-3.1-8b:Q4_K_M llama-3.2-1b:F16" bash dev/ab_h100.sh
# A switch on one tree: OLD=. OLD_ENV="OXIGPU_ROBUST=1" bash dev/ab_h100.sh
# Env: ROWS (shape:type, as `oxigpu synth`), OLD (the other package's parent folder, default .wt/old),
# OLD_ENV / NEW_ENV (assignments for one side), ARGS (bench arguments), ROUNDS, TIMEOUT_S (per bench run),
# PY (the interpreter).
set -u -o pipefail

ROWS=${ROWS:-"llama-3.1-8b:Q4_K_M"}
OLD=${OLD:-.wt/old}
OLD_ENV=${OLD_ENV:-}
NEW_ENV=${NEW_ENV:-}
ARGS=${ARGS:-"-p 0 -n 128 --reps 3"}
ROUNDS=${ROUNDS:-2}
TIMEOUT_S=${TIMEOUT_S:-100}
PY=${PY:-python3}
MODEL=$(realpath -m "${MODEL:-/tmp/ab.gguf}")
BASE=${PYTHONPATH:-}
trap 'rm -f "$MODEL"' EXIT

# side NAME PACKAGE_PARENT ENV: one bench run of $MODEL, summarized
side() {
    local out
    # run from the package's parent: `python -m` puts the working directory first on sys.path, so a
    # package there would shadow the one on PYTHONPATH
    out=$(cd "$2" && env PYTHONPATH="$PWD${BASE:+:$BASE}" $3 timeout "$TIMEOUT_S" \
          "$PY" -m oxigpu bench -m "$MODEL" $ARGS --backend wgpu --json 2>/dev/null | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
tests = [("pp", d["pp"])] + [("tg@d%d" % t["depth"], t) for t in d["tg"]]
parts = ["%s %.1f %s" % (k, t["tokens_per_s"], [round(r, 1) for r in t["runs"]]) for k, t in tests if t]
print("; ".join(parts))') || out="FAILED"
    echo "$row $1: $out"
}

for row in $ROWS; do
    "$PY" -m oxigpu synth "${row%%:*}" --type "${row##*:}" -o "$MODEL" >/dev/null 2>&1 || { echo "$row: synth failed"; continue; }
    for _ in $(seq "$ROUNDS"); do
        side old "$OLD" "$OLD_ENV"
        side new . "$NEW_ENV"
    done
done
