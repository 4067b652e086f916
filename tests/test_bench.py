"""`oxigpu bench` on tiny synthetic models, numpy and wgpu (lavapipe in CI): every field present and sane,
profiles that add up, the CLI's JSON and markdown. Speed itself is never asserted."""
from __future__ import annotations

import json
import math
import time

import pytest
from click.testing import CliRunner

from oxigpu.cli.main import cli
from oxigpu.errors import DeviceError, InvalidParameterError
from oxigpu.tools.bench import run_bench, to_markdown

P, N, DEPTHS = 20, 6, (0, 9)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """tiny-qwen2 (tied LM head) and tiny-gemma3 (sliding-window layers, so K/V reads are capped)."""
    from oxigpu.synth import synthesize
    out = tmp_path_factory.mktemp("bench")
    return {name: str(synthesize(name, out / f"{name}.gguf", seed=3).path) for name in ("tiny-qwen2", "tiny-gemma3")}


@pytest.fixture(scope="module")
def wgpu_ok() -> None:
    from oxigpu.backends.wgpu.device import Device
    try:
        Device.get()
    except DeviceError as e:
        pytest.skip(str(e))


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check(r: dict, backend: str, profiled: bool) -> None:
    assert r["backend"] == backend and r["reps"] == 2
    for key in ("file_bytes", "load_s", "engine_load_s", "memory_bytes", "weight_bytes", "dispatches_per_step",
                "n_ctx"):
        assert _positive(r[key]), key
    assert r["roofline_gbs"] is None or _positive(r["roofline_gbs"])
    assert r["n_ctx"] >= max(P, DEPTHS[-1] + N + 1)
    assert r["load_s"] >= r["engine_load_s"]
    assert r["architecture"] in ("qwen2", "gemma3") and r["file_type"] == "Q4_K_M"
    pp = r["pp"]
    assert pp["n_tokens"] == P and len(pp["runs"]) == 2 and all(_positive(x) for x in pp["runs"])
    assert pp["min"] <= pp["tokens_per_s"] <= pp["max"]
    if profiled:
        _check_prefill_profile(pp["profile"], r, backend)
    else:
        assert pp["profile"] is None
    assert [t["depth"] for t in r["tg"]] == list(DEPTHS)
    for t in r["tg"]:
        assert t["n_tokens"] == N and all(_positive(x) for x in t["runs"])
        assert t["min"] <= t["tokens_per_s"] <= t["max"]
        assert t["bytes_per_token"] > r["weight_bytes"]           # K/V rows come on top of the weights
        assert math.isclose(t["gbs"], t["bytes_per_token"] * t["tokens_per_s"] / 1e9)
        if r["roofline_gbs"] is None:            # a CPU, or a device of unknown bandwidth: no percentage
            assert t["roofline_pct"] is None
        else:
            assert math.isclose(t["roofline_pct"], 100 * t["gbs"] / r["roofline_gbs"])
        p = t["profile"]
        if not profiled:
            assert p is None
            continue
        assert p["position"] == t["depth"] + N // 2
        assert math.isclose(sum(row["percent"] for row in p["rows"]), 100, abs_tol=1e-6)
        assert all(row["seconds"] >= 0 and row["dispatches"] >= 1 for row in p["rows"])
        assert sum(row["dispatches"] for row in p["rows"]) == r["dispatches_per_step"]
        assert math.isclose(sum(row["seconds"] for row in p["rows"]), p["step_s"]) and _positive(p["step_s"])
        # the per-shape rows split the same nodes and seconds finer
        assert sum(n["dispatches"] for n in p["nodes"]) == r["dispatches_per_step"]
        assert math.isclose(sum(n["seconds"] for n in p["nodes"]), p["step_s"])
        assert {n["family"] for n in p["nodes"]} == {row["family"] for row in p["rows"]}
        families = {row["family"] for row in p["rows"]}
        assert {"sample", "rope_kv_attention", "rms_norm", "embed"} <= families   # decode: rope + attention fused
        assert any(f.startswith("matmul ") for f in families) and any(f.startswith("lm_head ") for f in families)
        if backend == "wgpu":
            assert p["source"] in ("timestamp", "wall")
            assert all(_positive(p[k]) for k in ("gpu_pass_s", "host_encode_s", "submit_s"))
            # in-step costs: every row's a difference of two timings, never below zero (a row under the timing
            # noise costs 0); the largest rows cost time. Each within the one-pass step where the GPU's clock
            # times the passes: by wall clock (submit and wait included) the one-pass median and a row's pair
            # of medians are separate samples, which a loaded machine (two test workers, other jobs) moves
            # apart by more than a row costs, so there a row is only held below the step's row-by-row sum.
            bound = p["gpu_pass_s"] if p["source"] == "timestamp" else p["step_s"]
            for n in p["nodes"]:
                assert math.isfinite(n["in_step_s"]) and 0 <= n["in_step_s"] < bound, (n, p["gpu_pass_s"], bound)
            assert max(n["in_step_s"] for n in p["nodes"]) > 0
        else:
            assert p["source"] == "wall" and p["gpu_pass_s"] is None
            assert all(n["in_step_s"] is None for n in p["nodes"])
    md = to_markdown(json.loads(json.dumps(r)))      # renders after a JSON round trip (as from --json)
    assert f"pp{P}" in md and f"tg{N} @ d{DEPTHS[1]}" in md and md.count("\n|") >= 3
    assert ("Where the time goes" in md) == profiled


def _matmul_flops(r: dict, rows: int) -> int:
    """2 x weights x rows over the file's 2-D weights, the token embedding aside (gathered, not multiplied);
    the LM head (output.weight, or the tied embedding) runs on the last row only."""
    from oxigpu.gguf import GGUFFile
    f = GGUFFile(r["model"])
    try:
        ts = {t.name: t.shape for t in f.tensors.values()}
    finally:
        f.close()
    body = sum(s[0] * s[1] for name, s in ts.items()
               if len(s) == 2 and name not in ("token_embd.weight", "output.weight"))
    head = ts.get("output.weight", ts["token_embd.weight"])
    return 2 * rows * body + 2 * head[0] * head[1]


def _check_prefill_profile(p: dict, r: dict, backend: str) -> None:
    """The pp test's profile: one chunk, nodes adding up, matmul FLOPs as counted from the file's weights."""
    assert p["n_tokens"] == min(P, p["chunk_rows"]) and p["chunk_rows"] >= p["n_tokens"]
    assert math.isclose(sum(row["percent"] for row in p["rows"]), 100, abs_tol=1e-6)
    assert all(row["seconds"] >= 0 and row["dispatches"] >= 1 for row in p["rows"])
    assert math.isclose(sum(row["seconds"] for row in p["rows"]), p["step_s"]) and _positive(p["step_s"])
    assert sum(n["dispatches"] for n in p["nodes"]) == sum(row["dispatches"] for row in p["rows"])
    assert math.isclose(sum(n["seconds"] for n in p["nodes"]), p["step_s"])
    families = {row["family"] for row in p["rows"]}
    assert {n["family"] for n in p["nodes"]} == families
    assert {"attention", "rms_norm", "embed"} <= families and "sample" not in families
    assert any(f.startswith("matmul ") for f in families) and any(f.startswith("lm_head ") for f in families)
    for n in p["nodes"]:
        is_mm = n["family"].startswith(("matmul ", "lm_head "))
        assert (n["flops"] > 0) == is_mm, n
        assert (n["tflops"] is None) == (not is_mm or n["seconds"] == 0), n
    assert p["matmul_flops"] == sum(n["flops"] for n in p["nodes"]) == _matmul_flops(r, p["chunk_rows"])
    assert math.isclose(p["matmul_s"], sum(n["seconds"] for n in p["nodes"] if n["flops"]))
    assert _positive(p["matmul_tflops"])
    if backend == "wgpu":
        assert p["source"] in ("timestamp", "wall") and _positive(p["gpu_pass_s"])
    else:
        assert p["source"] == "wall" and p["gpu_pass_s"] is None


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-gemma3"])
def test_numpy(models, name):
    r = run_bench(models[name], n_prompt=P, n_gen=N, depths=DEPTHS, reps=2, backend="numpy", profile=True)
    _check(r, "numpy", profiled=True)
    # numpy holds float32 matrices: its weights take more than the file; dispatches are ops + the host sampler
    assert r["weight_bytes"] > r["file_bytes"] / 2


@pytest.mark.gpu
def test_wgpu(models, wgpu_ok, monkeypatch):
    from oxigpu.tools import bench
    monkeypatch.setattr(bench, "_PROFILE_REPEATS", 3)   # as in the wall-clock test below: same path and checks
    r = run_bench(models["tiny-qwen2"], n_prompt=P, n_gen=N, depths=DEPTHS, reps=2, backend="wgpu", profile=True)
    _check(r, "wgpu", profiled=True)
    # raw GGUF blocks on the device: the weights are about the file's tensor bytes
    assert r["weight_bytes"] < r["file_bytes"] * 1.2 and r["memory_bytes"] >= r["weight_bytes"]
    assert r["device"].endswith(" dots in GEMV and GEMM)")      # the numerics a figure was measured with


@pytest.mark.gpu
def test_wgpu_without_timestamps_times_by_wall_clock(models, wgpu_ok, monkeypatch):
    from oxigpu.backends.wgpu.device import Device
    from oxigpu.tools import bench
    monkeypatch.setattr(Device, "has_timestamps", property(lambda self: False))
    # medians of 3 timings, not 5 (still robust to one outlier): by wall clock each timed pass runs the whole
    # step three times (a warm-up, two timed), and the in-step rows take 2 x repeats such passes per row, per
    # profiled depth (on lavapipe that loop was ~3/4 of this test's 2 minutes); the path and every check are
    # the same (0 <= a row's in-step cost < the row-by-row step sum, some row > 0)
    monkeypatch.setattr(bench, "_PROFILE_REPEATS", 3)
    r = run_bench(models["tiny-gemma3"], n_prompt=P, n_gen=N, depths=DEPTHS, reps=2, backend="wgpu", profile=True)
    _check(r, "wgpu", profiled=True)
    assert all(t["profile"]["source"] == "wall" for t in r["tg"])


def test_kv_bytes_follow_depth(models):
    """tiny-qwen2: 3 layers, 2 KV heads x 64, f16 cache: 3 * 2 * 128 * 2 bytes per cached row."""
    r = run_bench(models["tiny-qwen2"], n_prompt=0, n_gen=N, depths=DEPTHS, reps=1, backend="numpy")
    assert r["pp"] is None
    for t in r["tg"]:
        assert t["mean_n_kv"] == t["depth"] + (N + 1) / 2
        assert math.isclose(t["bytes_per_token"] - r["weight_bytes"], t["mean_n_kv"] * 3 * 2 * 128 * 2)


@pytest.mark.parametrize("kw, fragment", [
    ({"n_prompt": 0, "n_gen": 0}, "not both 0"),
    ({"depths": (-1,)}, "depths"),
    ({"reps": 0}, "reps"),
    ({"n_ctx": 16}, "n_ctx=16 is too small"),
])
def test_bad_arguments(models, kw, fragment):
    args = {"n_prompt": P, "n_gen": N, "reps": 1, "backend": "numpy", **kw}
    with pytest.raises(InvalidParameterError, match=fragment):
        run_bench(models["tiny-qwen2"], **args)


def test_cli_json_and_markdown(models):
    base = ["bench", "-m", models["tiny-qwen2"], "-p", str(P), "-n", str(N), "-d", "0,9", "-r", "2",
            "--backend", "numpy"]
    res = CliRunner().invoke(cli, [*base, "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    _check(r, "numpy", profiled=False)
    assert r["roofline_gbs"] is None                     # never a fixed figure on a CPU
    plain = CliRunner().invoke(cli, base)
    assert plain.exit_code == 0 and "roofline" not in plain.stdout and "| GB/s |" in plain.stdout
    res = CliRunner().invoke(cli, [*base, "--profile", "--roofline-gbs", "50"])
    assert res.exit_code == 0, res.output
    assert "| tg6 @ d9 |" in res.stdout and "% of 50 GB/s" in res.stdout and "| sample | 1 |" in res.stdout
    assert "pp20: run 2/2" in res.stderr
    bad = CliRunner().invoke(cli, [*base, "-d", "0,x"])
    assert bad.exit_code == 1 and "--depth takes comma-separated integers" in bad.output


def test_roofline_by_adapter_name():
    from oxigpu.tools.bench import roofline_for
    assert roofline_for("NVIDIA H100 80GB HBM3")[0] == 3100.0
    assert roofline_for("NVIDIA H100 PCIe")[0] == 2000.0
    assert roofline_for("NVIDIA H200")[0] == 4800.0
    assert roofline_for("NVIDIA A100-SXM4-80GB")[0] == 2039.0
    assert roofline_for("NVIDIA L4")[0] == 300.0 and roofline_for("NVIDIA L40S")[0] == 864.0
    assert roofline_for("llvmpipe (LLVM 15.0.6, 256 bits)") is None
    assert roofline_for("Intel(R) UHD Graphics 630") is None


def test_warmup_lasts_until_the_clock_is_up():
    """Short warm-ups repeat for at least WARMUP_S before the timed runs (an idle GPU's clock needs it);
    a long one runs once."""
    from oxigpu.tools import bench

    calls: list[int] = []

    def once(n: int) -> float:
        calls.append(n)
        time.sleep(0.01)
        return 1.0

    out = bench._repeat("t", once, 8, 2, 3, lambda _: None)
    warm = calls[:-3]
    assert calls[-3:] == [8, 8, 8] and set(warm) == {2} and len(out["runs"]) == 3
    assert bench.WARMUP_S / 0.01 / 2 <= len(warm) <= bench.WARMUP_S / 0.01 + 1
    calls.clear()
    bench._repeat("t", lambda n: (calls.append(n), time.sleep(bench.WARMUP_S))[1] or 1.0, 8, 2, 1, lambda _: None)
    assert calls == [2, 8]


def test_batched_bench_cli_json_and_table(models):
    """`oxigpu bench --batch`: llama-batched-bench's columns per batch size, consistent with each other."""
    base = ["bench", "-m", models["tiny-qwen2"], "-p", "12", "-n", "4", "--batch", "1,3", "--backend", "numpy"]
    res = CliRunner().invoke(cli, [*base, "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert [x["b"] for x in r["rows"]] == [1, 3]
    for x in r["rows"]:
        assert (x["pp"], x["tg"], x["n_kv"]) == (12, 4, x["b"] * 16)
        assert all(_positive(x[k]) for k in ("t_pp", "s_pp", "t_tg", "s_tg", "t", "s"))
        assert math.isclose(x["s_pp"], x["b"] * 12 / x["t_pp"]) and math.isclose(x["s_tg"], x["b"] * 4 / x["t_tg"])
        assert math.isclose(x["t"], x["t_pp"] + x["t_tg"]) and math.isclose(x["s"], x["n_kv"] / x["t"])
    res = CliRunner().invoke(cli, base)
    assert res.exit_code == 0 and "|    PP |     TG |    B |   N_KV |" in res.stdout
    assert "B=3: S_PP" in res.stderr
    bad = CliRunner().invoke(cli, [*base[:-4], "--batch", "0,2", "--backend", "numpy"])
    assert bad.exit_code == 1 and "batch sizes >= 1" in bad.output
    wide = CliRunner().invoke(cli, [*base, "--n-ctx", "64", "--json"])       # a server's context: plans sized by it
    assert wide.exit_code == 0, wide.output
    w = json.loads(wide.stdout)
    assert w["n_ctx"] == 64 and r["n_ctx"] == 16 and [x["n_kv"] for x in w["rows"]] == [16, 48]
    short = CliRunner().invoke(cli, [*base, "--n-ctx", "8"])
    assert short.exit_code == 1 and "less than npp + ntg" in short.output
