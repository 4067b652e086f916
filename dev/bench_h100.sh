#!/usr/bin/env bash
# `oxigpu bench` on every row of ../shared/ANCHORS.md's llama.cpp table (random-weight files written by
# `oxigpu synth`), then one markdown table: ours vs llama.cpp (llama-bench, CUDA, the same H100).
#
# On the device machine (carry .gpu and .gl), from the repo root, in one 10-minute call:
#   for f in .gl/*.deb; do dpkg -x $f /; done; source .gpu/bootstrap.sh;
#   export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; bash dev/bench_h100.sh
#
# Per row: synth the file to $MODEL, bench it (pp512, tg128, + tg128 at depth 4096 for Q4_K_M, with the
# kernel profile), delete it. Rows run in table order; one that cannot start $MIN_ROW_S seconds before
# $DEADLINE_S (counted from this script's start) is listed as skipped, and each row is cut at $ROW_TIMEOUT_S,
# so the call ends in time. A failing row logs its error and the table goes on.
#
# Writes under $OUT (a device call returns at most 8 files): rows.log (each row's synth line, bench progress,
# its markdown with the profile, or the traceback), results.jsonl (one line per row: shape, type, and the
# bench JSON or the error) and table.md (the final table, rewritten after every row and printed at the end).
#
# Overrides for local checks, e.g. on lavapipe:
#   OUT=/tmp/b ROWS="tiny-qwen2:Q4_K_M tiny-llama:Q8_0" BENCH_ARGS="-p 32 -n 8 --reps 2 --profile --backend wgpu" \
#     DEPTH=0,64 bash dev/bench_h100.sh
set -u -o pipefail

OUT=${OUT:-/tmp/bench_h100}
ROWS=${ROWS:-"qwen2.5-0.5b:Q4_K_M qwen2.5-0.5b:Q8_0 qwen2.5-0.5b:Q4_0 qwen2.5-0.5b:F16
              llama-3.2-1b:Q4_K_M llama-3.2-1b:Q8_0 llama-3.2-1b:Q4_0 llama-3.2-1b:F16
              llama-3.1-8b:Q4_K_M llama-3.1-8b:Q8_0 llama-3.1-8b:Q4_0 llama-3.1-8b:F16"}
BENCH_ARGS=${BENCH_ARGS:-"-p 512 -n 128 --reps 3 --profile --backend wgpu"}
DEPTH=${DEPTH:-0,4096}            # the Q4_K_M rows' depths; other rows run at depth 0
MODEL=${MODEL:-/tmp/m.gguf}
DEADLINE_S=${DEADLINE_S:-540}
ROW_TIMEOUT_S=${ROW_TIMEOUT_S:-150}
MIN_ROW_S=${MIN_ROW_S:-25}
PY=${PY:-python3}

mkdir -p "$OUT"
LOG=$OUT/rows.log
RESULTS=$OUT/results.jsonl
JSON=$(mktemp)
: >"$LOG"
: >"$RESULTS"
START=$(date +%s)
trap 'rm -f "$MODEL" "$JSON"' EXIT

# record SHAPE TYPE ERROR: one results.jsonl line, the bench JSON in $JSON when ERROR is empty
record() {
    "$PY" - "$1" "$2" "$3" "$JSON" >>"$RESULTS" <<'EOF'
import json, sys
shape, ftype, error, path = sys.argv[1:]
row = {"shape": shape, "type": ftype, "error": error or None, "result": None}
if not error:
    row["result"] = json.load(open(path))
print(json.dumps(row))
EOF
}

# table: table.md from results.jsonl, llama.cpp's figures from ANCHORS.md embedded below
table() {
    "$PY" - "$RESULTS" >"$OUT/table.md" <<'EOF'
import json, sys
ANCHORS = {   # (shape, type): (pp512, tg128, tg128 at depth 4096), llama-bench on the H100, ANCHORS.md
    ("qwen2.5-0.5b", "Q4_K_M"): (40670, 860, 804), ("qwen2.5-0.5b", "Q8_0"): (45690, 866, None),
    ("qwen2.5-0.5b", "Q4_0"): (44746, 929, None), ("qwen2.5-0.5b", "F16"): (74706, 729, None),
    ("llama-3.2-1b", "Q4_K_M"): (31319, 871, 807), ("llama-3.2-1b", "Q8_0"): (41981, 785, None),
    ("llama-3.2-1b", "Q4_0"): (34699, 949, None), ("llama-3.2-1b", "F16"): (56118, 690, None),
    ("llama-3.1-8b", "Q4_K_M"): (9117, 266, None), ("llama-3.1-8b", "Q8_0"): (10653, 230, None),
    ("llama-3.1-8b", "Q4_0"): (10772, 319, None), ("llama-3.1-8b", "F16"): (21539, 165, None),
}
def num(x):
    return "" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:.2f}"
def ratio(ours, ref):
    return "" if ours is None or not ref else f"{ours / ref:.2f}"
rows = [json.loads(line) for line in open(sys.argv[1])]
done = [r["result"] for r in rows if r["result"]]
pp_name = f"pp{done[0]['pp']['n_tokens']}" if done and done[0]["pp"] else "pp512"
tg_name = f"tg{done[0]['tg'][0]['n_tokens']}" if done and done[0]["tg"] else "tg128"
deep = max((t["depth"] for r in done for t in r["tg"]), default=4096) or 4096
print(f"| shape | type | {pp_name} | llama.cpp | ratio | {tg_name} | llama.cpp | ratio | {tg_name} @ d{deep} | "
      f"llama.cpp | ratio | GB/s | % roofline | load s | dispatches/step |")
print("|---|---|" + "---:|" * 13)
errors = []
for r in rows:
    ref = ANCHORS.get((r["shape"], r["type"]), (None, None, None))
    res = r["result"]
    if res is None:
        print(f"| {r['shape']} | {r['type']} | {r['error'].splitlines()[0][:160]} |" + " |" * 12)
        continue
    pp = res["pp"]["tokens_per_s"] if res["pp"] else None
    tg0 = next((t for t in res["tg"] if t["depth"] == 0), None)
    tgd = next((t for t in res["tg"] if t["depth"] == deep), None)
    a, b, c = pp, *(t["tokens_per_s"] if t else None for t in (tg0, tgd))
    gbs = num(tg0["gbs"]) if tg0 else ""
    roof = f"{tg0['roofline_pct']:.1f}" if tg0 else ""
    print(f"| {r['shape']} | {r['type']} | {num(a)} | {num(ref[0])} | {ratio(a, ref[0])} | {num(b)} | {num(ref[1])} | "
          f"{ratio(b, ref[1])} | {num(c)} | {num(ref[2])} | {ratio(c, ref[2])} | {gbs} | {roof} | "
          f"{res['load_s']:.1f} | {res['dispatches_per_step']} |")
if done:
    d = done[0]
    print(f"\nOurs: `oxigpu bench` on {d['device']}, {d['backend']} backend, median of {d['reps']} runs, greedy "
          f"sampling on the device; GB/s and % roofline ({d['roofline_gbs']:,.0f} GB/s) are for {tg_name} at depth 0. "
          f"llama.cpp: llama-bench -ngl 99 -fa 1 -r 3 (ANCHORS.md). Ratio = ours / llama.cpp.")
EOF
}

for row in $ROWS; do
    shape=${row%%:*}
    type=${row##*:}
    depth=0
    [[ $type == Q4_K_M ]] && depth=$DEPTH
    left=$((DEADLINE_S - ($(date +%s) - START)))
    if ((left < MIN_ROW_S)); then
        echo "=== $shape $type: skipped, ${left}s left of the ${DEADLINE_S}s budget" | tee -a "$LOG"
        record "$shape" "$type" "skipped: the ${DEADLINE_S}s budget was spent"
        table
        continue
    fi
    limit=$((left < ROW_TIMEOUT_S ? left : ROW_TIMEOUT_S))
    t0=$(date +%s)
    echo "=== $shape $type: depth $depth, at most ${limit}s ($(date +%T))" | tee -a "$LOG"
    rm -f "$MODEL"
    error=""
    if ! timeout "$limit" "$PY" -m oxigpu synth "$shape" --type "$type" -o "$MODEL" >>"$LOG" 2>&1; then
        error="synth failed or timed out (see rows.log)"
    elif limit=$((limit - ($(date +%s) - t0))); ((limit < 5)); then
        error="no time left to bench after synth"
    else
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
        timeout "$limit" "$PY" -m oxigpu bench -m "$MODEL" $BENCH_ARGS -d "$depth" --json -v >"$JSON" 2>>"$LOG"
        rc=$?
        if ((rc == 124)); then
            error="bench timed out after ${limit}s"
        elif ((rc != 0)); then
            error="bench exit $rc: $(grep -v '^\s*$' "$LOG" | tail -n 1)"
        fi
    fi
    rm -f "$MODEL"
    if [[ -z $error ]]; then
        "$PY" -c 'import json, sys; from oxigpu.tools.bench import to_markdown; print(to_markdown(json.load(open(sys.argv[1]))))' \
            "$JSON" >>"$LOG" 2>&1 || error="rendering the bench JSON failed (see rows.log)"
    fi
    [[ -n $error ]] && echo "=== $shape $type: $error" | tee -a "$LOG"
    record "$shape" "$type" "$error"
    table
    echo "=== $shape $type: done in $(($(date +%s) - t0))s" | tee -a "$LOG"
done

echo
cat "$OUT/table.md"
