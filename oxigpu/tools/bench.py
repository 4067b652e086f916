"""Speed of one model on one backend, measured the way llama-bench measures llama.cpp (``oxigpu bench``).

What is measured (token ids are random valid ids, so the tokenizer plays no part):

- ``pp<P>``: a P-token prompt evaluated into an empty cache by the engine's chunked prefill, tokens/s; at
  depth D (``pp<P> @ d<D>``, llama-bench's ``-d`` applies to pp too) the P tokens follow D cached ones;
- ``tg<N>`` at depth D: N tokens generated through :meth:`Engine.start` after a 1-token prompt with D tokens
  already cached (filled by an untimed prefill), tokens/s. This is exactly what ``oxigpu run`` does (on a
  backend with ``decode_stream``, the GPU-resident loop), and it evaluates N tokens: the prompt token and
  N - 1 drawn ones (D a multiple of the KV block, 32, as 0 and 4096 are: the cache holds whole blocks, so
  at another D each run also evaluates the D mod 32 tokens past the last full one). End-of-generation ids
  are banned so every run yields N tokens; sampling is greedy
  unless ``temperature > 0`` (then ``oxigpu run``'s default filters apply).

Each figure is the median of ``reps`` runs after warm-up runs, shortened to two prefill chunks or 16
tokens (they compile nothing: pipelines are built at load, the resident loop on its first batch), repeated
for at least ``WARMUP_S``: an idle GPU runs at a fraction of its clock and a single warm-up of a small
model (tens of ms) can end before the clock is up, leaving some timed runs at a fraction of the others'
speed.

Effective bandwidth of a tg run: bytes read per token, i.e. the decode plan's weights as the backend
stores them (raw GGUF blocks on wgpu, float32 matrices on numpy; an embedding table that is only gathered
from counts whole, as llama.cpp's bandwidth figures usually count it) plus the K/V rows attention reads at
the run's mean position, times tokens/s; also as a percentage of ``roofline_gbs``.

With ``profile``, the first prefill chunk of the pp test (up to ``prefill_chunk`` tokens at position 0)
is split the same way (:func:`_profile_prefill`; per-shape rows add each matmul's TFLOP/s), and one decode
step at that mean position is split by kernel family (matmul per quant type,
the LM head apart, attention, norms, ...). On wgpu every node is its own compute pass with GPU timestamps
(``Device.time_passes``; wall-clock ``Device.time`` where the adapter lacks timestamp-query), next to the
host's encode and submit time per step and the GPU time of the step as one pass. A node alone in a pass
pays the pass's start and end, and a node in a chain of its own copies finds other weights in L2 than in
the step, so each per-shape row of a decode step is also timed where it runs (``in_step_s``): the one-pass
step less the same pass with the row's nodes left out (their consumers read stale values for that pass;
only the step's own K/V row is written, and a normal step rewrites it after; on a CPU adapter stale values
can change the arithmetic's speed, so there the figures are rough). On numpy each op is
timed by wall clock through the backend's trace hook, and the host sampler is one more family.

:func:`run_bench` returns a JSON-ready dict; :func:`to_markdown` renders one, also after a JSON round trip
(``tools/compare.py`` reads the JSON of ``oxigpu bench --json``). Keys: model, name, architecture, file_type,
file_bytes, backend, device, n_ctx, cache_types (K, V), reps, temperature, roofline_gbs, load_s (model open ->
first token ready), engine_load_s, memory_bytes (the backend's buffers after every run), weight_bytes,
dispatches_per_step (wgpu: dispatches of one resident decode step; numpy: ops, the host sampler included),
pp_depths and tg (one per depth), pp (pp_depths' first, or None); each test holds n_tokens, depth,
tokens_per_s, min, max, runs and profile (or None; pp's only); a tg also mean_n_kv, bytes_per_token, gbs and
roofline_pct.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import LlamaFileType

from ..backends.base import Step
from ..errors import InvalidParameterError
from ..graph.ir import Node, arg, matrices
from ..graph.plan import Plan
from ..quant import get_type
from ..runtime.decoding import sampler_config
from ..runtime.engine import Engine
from ..runtime.params import SamplingParams
from ..runtime.sampling import SamplerConfig, pack_batch, sample
from .rooflines import roofline_for

_WARMUP_TOKENS = 16
_PROFILE_REPEATS = 5
_CLOCK_WARMUP_S = 0.5
"""GPU busy time before profiling: an idle GPU sits at a low clock that short timed passes alone do not
raise (large GEMVs timed several times slow without this)."""

Log = Callable[[str], None]


def run_bench(model_path: str | Path, *, n_prompt: int = 512, n_gen: int = 128, depths: Sequence[int] = (0,),
              reps: int = 3, backend: str = "auto", n_ctx: int | None = None, temperature: float = 0.0,
              profile: bool = False, roofline_gbs: float | None = None, seed: int = 0,
              log: Log | None = None, cache_type_k: str = "f16", cache_type_v: str = "f16") -> dict[str, Any]:
    """Load the model, run pp and tg as the module docstring says, return the results (see its keys).

    ``n_prompt`` 0 skips pp, ``n_gen`` 0 skips tg. ``n_ctx`` defaults to the least the runs need.
    ``roofline_gbs`` None: the device's bandwidth from ROOFLINES on a GPU, none on a CPU (then no percentage).
    ``log`` receives one line per stage and per run, for progress output. ``cache_type_k`` / ``_v``: the KV
    cache's types (llama-bench's -ctk / -ctv).
    """
    say = log or (lambda line: None)
    depths = sorted(set(depths))
    _check_args(n_prompt, n_gen, depths, reps, roofline_gbs)
    need = max(depths[-1] + n_prompt, depths[-1] + n_gen + 1 if n_gen else 0)
    path = Path(model_path)
    t0 = time.perf_counter()
    say(f"loading {path.name} (n_ctx {n_ctx or need})")
    engine = Engine(path, backend=backend, n_ctx=n_ctx or need, max_seqs=1,   # one stream: one context of KV
                    cache_type_k=cache_type_k, cache_type_v=cache_type_v)
    if engine.n_ctx < need:
        raise InvalidParameterError(f"n_ctx={engine.n_ctx} is too small: these runs need {need} tokens")
    ids = np.random.default_rng(seed).integers(0, engine.vocab_size, need + 1).tolist()
    ban = {t: -math.inf for t in engine.tokenizer.eog_ids}
    params = SamplingParams(max_tokens=max(1, n_gen), seed=seed, logit_bias=ban,
                            **({"temperature": temperature} if temperature > 0 else
                               {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}))
    cfg = sampler_config(params, engine.n_ctx)
    logits, _ = engine.eval(ids[:1])
    sample(logits, cfg, ids[:1])
    load_s = time.perf_counter() - t0
    say(f"loaded {path.name} on {engine.backend_name} in {load_s:.2f} s (n_ctx {engine.n_ctx})")

    plan = engine.decode_plan

    def step_at(pos: int | None) -> list[tuple[Node | None, list[Any]]]:
        return _step_groups(engine, cfg, pos)

    step = step_at(None)
    roofline_source = "given" if roofline_gbs is not None else None
    if roofline_gbs is None and engine.backend.resident is not None:
        info = engine.backend.resident.dev.info()
        known = roofline_for(info["name"])
        if known is not None and info["adapter_type"] != "CPU":
            roofline_gbs, roofline_source = known
    result: dict[str, Any] = {
        **_describe_model(engine, path), "backend": engine.backend_name, "device": _device_name(engine),
        "n_ctx": engine.n_ctx, "cache_types": list(engine.cache_types), "reps": reps,
        "temperature": params.temperature, "roofline_gbs": roofline_gbs,
        "roofline_source": roofline_source,
        "load_s": load_s, "engine_load_s": engine.load_s, "weight_bytes": engine.backend.weight_bytes(plan),
        "dispatches_per_step": sum(len(ds) for _, ds in step) + (0 if engine.backend.resident else 1),
        "pp": None, "pp_depths": [], "tg": []}

    for depth in depths if n_prompt else ():
        result["pp_depths"].append(_pp(engine, ids, depth, n_prompt, reps, seed, say))
    if n_prompt:
        result["pp"] = result["pp_depths"][0]
        result["pp"]["profile"] = None
        if profile:
            chunk = ids[:min(n_prompt, engine.prefill_chunk)]
            say(f"pp{n_prompt}: profiling one {len(chunk)}-token prefill chunk")
            result["pp"]["profile"] = _profile_prefill(engine, chunk)
            say(f"pp{n_prompt}: profiled one {len(chunk)}-token prefill chunk")

    for depth in depths if n_gen else ():
        result["tg"].append(_tg(engine, ids, depth, n_gen, params, cfg, step_at, reps, profile, result, say))
    result["memory_bytes"] = engine.backend.memory_bytes()
    return result


def _check_args(n_prompt: int, n_gen: int, depths: Sequence[int], reps: int, roofline_gbs: float | None) -> None:
    if n_prompt < 0 or n_gen < 0 or not (n_prompt or n_gen):
        raise InvalidParameterError(f"need n_prompt >= 0 and n_gen >= 0, not both 0 (got {n_prompt}, {n_gen})")
    if not depths or depths[0] < 0:
        raise InvalidParameterError(f"depths must be integers >= 0, got {list(depths)}")
    if reps < 1:
        raise InvalidParameterError(f"reps must be >= 1, got {reps}")
    if roofline_gbs is not None and not roofline_gbs > 0:
        raise InvalidParameterError(f"roofline_gbs must be > 0, got {roofline_gbs}")


def _pp(engine: Engine, ids: list[int], depth: int, n_prompt: int, reps: int, seed: int, say: Log
        ) -> dict[str, Any]:
    """pp at one depth (llama-bench's ``pp512 @ d32768``: a prompt of ``n_prompt`` tokens after ``depth``
    tokens of context). Depth 0: the prompt into an empty cache. Otherwise the context is evaluated once
    (untimed) and each run times a fresh random continuation of it, its first ``depth`` tokens taken from
    the prefix cache (whole blocks: a depth that is not a multiple of KV_BLOCK recomputes its last partial
    block, counted in the rate)."""
    if not depth:
        def pp_once(n: int) -> float:
            engine.forget()
            t = time.perf_counter()
            engine.eval(ids[:n])
            return n / (time.perf_counter() - t)
    else:
        engine.forget()
        engine.eval(ids[:depth])
        rng = np.random.default_rng(seed + 1)

        def pp_once(n: int) -> float:
            tokens = ids[:depth] + rng.integers(0, engine.vocab_size, n).tolist()
            t = time.perf_counter()
            _, reused = engine.eval(tokens)
            return (len(tokens) - reused) / (time.perf_counter() - t)
    name = f"pp{n_prompt}" + (f" @ d{depth}" if depth else "")
    out = _repeat(name, pp_once, n_prompt, min(n_prompt, 2 * engine.prefill_chunk), reps, say)
    out["depth"] = depth
    engine.forget()
    return out


def _tg(engine: Engine, ids: list[int], depth: int, n_gen: int, params: SamplingParams, cfg: SamplerConfig,
        step_at: Callable[[int | None], list[tuple[Node | None, list[Any]]]], reps: int, profile: bool,
        result: dict[str, Any], say: Log) -> dict[str, Any]:
    """tg at one depth: fill the cache to ``depth`` (untimed), then time generations of ``n_gen`` tokens;
    ``step_at(pos)``: the decode step's dispatches at pos, as :func:`_step_groups`."""
    if depth:
        engine.eval(ids[:depth])              # reuses what the cache already holds of it

    def tg_once(n: int) -> float:
        gen = engine.start(ids[:depth + 1], params.with_overrides(max_tokens=n))
        t = time.perf_counter()
        for _ in gen:
            pass
        dt = time.perf_counter() - t
        if len(gen.generated) != n:
            raise RuntimeError(f"a tg run generated {len(gen.generated)} of {n} tokens")
        return n / dt

    name = f"tg{n_gen}" + (f" @ d{depth}" if depth else "")
    out = _repeat(name, tg_once, n_gen, min(n_gen, _WARMUP_TOKENS), reps, say)
    mean_n_kv = depth + (n_gen + 1) / 2
    per_token = result["weight_bytes"] + _kv_bytes(engine.decode_plan, mean_n_kv)
    gbs = per_token * out["tokens_per_s"] / 1e9
    out.update(depth=depth, mean_n_kv=mean_n_kv, bytes_per_token=per_token, gbs=gbs,
               roofline_pct=100 * gbs / result["roofline_gbs"] if result["roofline_gbs"] else None, profile=None)
    if profile:
        ctx = ids[:depth + n_gen // 2 + 1]    # one step at the run's mean position
        say(f"{name}: profiling one decode step at position {len(ctx) - 1}")
        out["profile"] = (_profile_device if engine.backend.resident else _profile_host)(engine, ctx, cfg,
                                                                                    step_at(len(ctx) - 1))
        out["profile"]["position"] = len(ctx) - 1
        engine.forget()                       # the profile wrote rows outside any request
        say(f"{name}: profiled one step at position {len(ctx) - 1}")
    return out


WARMUP_S = 0.3
"""Least wall time of warm-up runs before a test's timed runs."""


def _repeat(name: str, once: Callable[[int], float], n: int, warmup: int, reps: int, say: Log) -> dict[str, Any]:
    """Warm-ups of ``warmup`` tokens for at least ``WARMUP_S`` (one at least, 50 at most), then ``reps``
    timed runs of ``n``: median, min, max tokens/s."""
    t = time.perf_counter()
    for _ in range(50):
        once(warmup)
        if time.perf_counter() - t >= WARMUP_S:
            break
    runs = []
    for i in range(reps):
        runs.append(once(n))
        say(f"{name}: run {i + 1}/{reps}: {runs[-1]:,.2f} t/s")
    return {"n_tokens": n, "tokens_per_s": statistics.median(runs), "min": min(runs), "max": max(runs),
            "runs": runs}


def _kv_bytes(plan: Plan, n_kv: float) -> float:
    """K and V bytes the plan's attention nodes read with ``n_kv`` cached rows (in the caches' types; a
    sliding-window layer reads at most its window)."""
    total = 0.0
    for node in plan.nodes:
        if node.op in ("attention", "rope_kv_attention"):
            k, v = arg(node, "cache_k"), arg(node, "cache_v")
            window = node.attrs.get("window", 0)
            total += (min(n_kv, window) if window else n_kv) * (k.nbytes + v.nbytes) / k.shape[0]
    return total


# -- where the time goes --------------------------------------------------------------------------------
def _step_groups(engine: Engine, cfg: SamplerConfig, pos: int | None = None
                 ) -> list[tuple[Node | None, list[Any]]]:
    """One decode step as (node, its dispatches), with the sampler the tg runs use (``cfg``'s: the
    greedy variant at temperature 0); the sampler is node None; ``pos``: grids sized for a step there, as
    the tg runs launch them. On the host each node is one op and the sampler is not in the list."""
    resident = engine.backend.resident
    if resident is not None:
        return resident.resident_step(engine.decode_plan, pack_batch([cfg], [1], [0]), pos)
    return [(node, [node]) for node in engine.decode_plan.nodes]


def _family(node: Node | None, plan: Plan) -> str:
    """The kernel family a node's time is charged to: its op, matmuls (fused ones too) per weight type(s),
    the LM head apart."""
    if node is None:
        return "sample"
    if node.op not in ("matmul", "matmul_add", "matmul_multi", "matmul_glu"):
        return node.op
    qtype = "+".join(dict.fromkeys(get_type(w.ggml_type).name for w in matrices(node)))
    return f"lm_head {qtype}" if node.outputs[0] is plan.outputs.get("logits") else f"matmul {qtype}"


def _profile_device(engine: Engine, ctx: list[int], cfg: SamplerConfig,
                    step: list[tuple[Node | None, list[Any]]]) -> dict[str, Any]:
    """GPU time per family of one resident decode step at position ``len(ctx) - 1``, and the host's share."""
    be, plan = engine.backend.resident, engine.decode_plan
    assert be is not None
    dev = be.dev
    # leaves this step's params, token and sampler slot in place
    for _ in be.decode_stream(plan, ctx, pack_batch([cfg], [len(ctx)], [0]), 1):
        pass
    groups = [ds for _, ds in step]
    flat = [d for ds in groups for d in ds]
    t_end = time.perf_counter() + _CLOCK_WARMUP_S
    while time.perf_counter() < t_end:
        dev.submit(flat * 8)
        dev.sync()
    if dev.has_timestamps:
        source = "timestamp"
        per = np.median([dev.time_passes(groups) for _ in range(_PROFILE_REPEATS)], axis=0).tolist()

        def pass_s(ds: list[Any]) -> float:
            return dev.time_passes([ds])[0]
    else:
        source = "wall"
        per = [dev.time(ds, repeat=10) for ds in groups]

        def pass_s(ds: list[Any]) -> float:
            return dev.time(ds, repeat=2)
    one_pass = statistics.median(pass_s(flat) for _ in range(_PROFILE_REPEATS))
    # each row's cost inside the step: the whole step less the step without that row's nodes, timed in
    # turns so clock drift cancels (their consumers read stale values for that pass; only this step's K/V
    # row is written, and the step below rewrites it)
    keys = [_node_key(node, plan) for node, _ in step]
    in_step = {}
    for key in dict.fromkeys(keys):
        without = [d for k, ds in zip(keys, groups) if k != key for d in ds]
        pairs = [(pass_s(flat), pass_s(without)) for _ in range(_PROFILE_REPEATS)]
        # a row cheaper than the timing noise can come out below zero: it costs nothing measurable
        in_step[key] = max(0.0, statistics.median(a for a, _ in pairs) - statistics.median(b for _, b in pairs))
    for _ in be.decode_stream(plan, ctx, pack_batch([cfg], [len(ctx)], [0]), 1):
        pass
    k = be.resident_batch
    enc = dev.device.create_command_encoder()
    t = time.perf_counter()
    for _ in range(k):
        dev.encode(enc, flat)
    encode_s = (time.perf_counter() - t) / k
    buffer = enc.finish()
    t = time.perf_counter()
    dev.queue.submit([buffer])
    submit_s = (time.perf_counter() - t) / k
    dev.sync()
    prof = _table(step, per, plan, source, in_step)
    prof.update(gpu_pass_s=one_pass, host_encode_s=encode_s, submit_s=submit_s)
    return prof


def _profile_host(engine: Engine, ctx: list[int], cfg: SamplerConfig,
                  step: list[tuple[Node | None, list[Any]]]) -> dict[str, Any]:
    """Wall-clock time per op of one decode step at position ``len(ctx) - 1`` (trace hook), plus sampling."""
    plan = engine.decode_plan
    per = _traced(engine, plan, ctx[-1:], len(ctx) - 1, [node for node, _ in step],
                  lambda out: sample(out["logits"], cfg, ctx, 0))
    prof = _table([*step, (None, [None])], per, plan, "wall")
    prof.update(gpu_pass_s=None, host_encode_s=None, submit_s=None)
    return prof


def _traced(engine: Engine, plan: Plan, tokens: list[int], pos: int, nodes: Sequence[Node],
            after: Callable[[dict[str, np.ndarray]], Any] | None = None) -> list[float]:
    """Median wall seconds of each of ``nodes`` (then of ``after(outputs)``, if given) over
    ``_PROFILE_REPEATS`` runs of ``plan`` on ``tokens`` at ``pos``, through the backend's trace hook."""
    index = {id(node): i for i, node in enumerate(nodes)}
    times = np.zeros((_PROFILE_REPEATS, len(nodes) + (after is not None)))
    for r in range(_PROFILE_REPEATS):
        last = time.perf_counter()

        def trace(node: Node, outs: tuple[np.ndarray, ...], r: int = r) -> None:
            nonlocal last
            now = time.perf_counter()
            times[r, index[id(node)]] = now - last
            last = now
        out = engine.backend.run(plan, Step.single(tokens, pos), trace=trace)
        if after is not None:
            t = time.perf_counter()
            after(out)
            times[r, -1] = time.perf_counter() - t
    return np.median(times, axis=0).tolist()


def _node_key(node: Node | None, plan: Plan) -> tuple[str, str, str]:
    """The row of the per-shape table a node's time goes to: (family, op, input shapes)."""
    if node is None:
        return _family(node, plan), "sample", ""
    return _family(node, plan), node.op, " ".join("x".join(map(str, v.shape)) for v in node.inputs[:3])


def _table(step: Sequence[tuple[Node | None, list[Any]]], seconds: Sequence[float], plan: Plan,
           source: str, in_step: dict[tuple[str, str, str], float] | None = None) -> dict[str, Any]:
    """Per-group times summed by family: seconds and dispatches per step, percent of their sum; ``in_step``:
    each per-shape row's cost inside the whole step (its nodes left out), seconds per step."""
    fams: dict[str, list[float]] = {}
    for (node, ds), s in zip(step, seconds):
        row = fams.setdefault(_family(node, plan), [0.0, 0])
        row[0] += s
        row[1] += len(ds)
    kernels: dict[tuple[str, str, str], list[float]] = {}
    for (node, ds), s in zip(step, seconds):
        row = kernels.setdefault(_node_key(node, plan), [0.0, 0, 0])
        row[0] += s
        row[1] += len(ds)
        row[2] += 1
    total = sum(s for s, _ in fams.values())
    rows = [{"family": f, "dispatches": int(n), "seconds": s, "percent": 100 * s / total if total else 0.0}
            for f, (s, n) in sorted(fams.items(), key=lambda kv: -kv[1][0])]
    nodes = [{"family": f, "op": op, "shapes": shp, "nodes": int(c), "dispatches": int(n), "seconds": s,
              "percent": 100 * s / total if total else 0.0,
              "in_step_s": None if in_step is None else in_step[(f, op, shp)]}
             for (f, op, shp), (s, n, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0])]
    return {"source": source, "step_s": total, "rows": rows, "nodes": nodes}


def _node_flops(node: Node) -> int:
    """2 m k n of a matmul-family node (n summed over its weights; matmul_glu's gate and up both count),
    0 for other ops."""
    if node.op not in ("matmul", "matmul_add", "matmul_multi", "matmul_glu"):
        return 0
    m, k = arg(node, "x").shape
    return 2 * m * k * sum(w.shape[0] for w in matrices(node))


def node_times(dev: Any, step: Sequence[tuple[Node | None, list[Any]]]) -> tuple[list[float], float, str]:
    """Seconds of each node's dispatches as its own pass and of the whole step as one pass (medians of
    ``_PROFILE_REPEATS``), after ``_CLOCK_WARMUP_S`` of the whole step to raise the clock, and their source:
    "timestamp" (GPU clock), or "wall" where the adapter lacks timestamp-query. The step's inputs must be
    on the device already (a step run just before)."""
    groups = [ds for _, ds in step]
    flat = [d for ds in groups for d in ds]
    t_end = time.perf_counter() + _CLOCK_WARMUP_S
    while time.perf_counter() < t_end:
        dev.submit(flat)
        dev.sync()
    if dev.has_timestamps:
        per = np.median([dev.time_passes(groups) for _ in range(_PROFILE_REPEATS)], axis=0).tolist()
        return per, statistics.median(dev.time_passes([flat])[0] for _ in range(_PROFILE_REPEATS)), "timestamp"
    return [dev.time(ds, repeat=3) for ds in groups], dev.time(flat, repeat=3), "wall"


def _profile_prefill(engine: Engine, chunk: list[int]) -> dict[str, Any]:
    """GPU time per node of one prefill chunk (``chunk``, at position 0), summed by family and by shape.

    The chunk is evaluated once (which leaves its inputs and step parameters on the device), then on wgpu
    every node's dispatches are replayed as their own timestamped pass after ``_CLOCK_WARMUP_S`` of the
    whole chunk (re-running it rewrites the same K/V rows); without timestamp-query, wall clock per node.
    On numpy, wall clock per op (trace hook). Matmul rows of the per-shape table carry ``flops`` and
    ``tflops`` (of the plan's ``chunk_rows``: a chunk shorter than the plan is padded, and the GEMMs run every
    row); ``matmul_s``, ``matmul_flops`` and ``matmul_tflops`` sum the matmul nodes.
    """
    be = engine.backend.resident
    plan = engine.prefill_plan if len(chunk) > 1 else engine.decode_plan
    engine.forget()
    engine.eval(chunk)
    if be is not None:
        step = be.node_dispatches(plan)
        per, one_pass, source = node_times(be.dev, step)
    else:
        step = [(node, [node]) for node in plan.nodes]
        source, per, one_pass = "wall", _traced(engine, plan, chunk, 0, plan.nodes), None
    engine.forget()
    prof = _table(step, per, plan, source)
    flops: dict[tuple[str, str, str], int] = {}
    for node, _ in step:
        key = (_family(node, plan), node.op, " ".join("x".join(map(str, v.shape)) for v in node.inputs[:3]))
        flops[key] = flops.get(key, 0) + _node_flops(node)
    for row in prof["nodes"]:
        f = flops[(row["family"], row["op"], row["shapes"])]
        row["flops"] = f
        row["tflops"] = f / row["seconds"] / 1e12 if f and row["seconds"] > 0 else None
    mm = [row for row in prof["nodes"] if row["flops"]]
    matmul_s = sum(row["seconds"] for row in mm)
    matmul_flops = sum(row["flops"] for row in mm)
    prof.update(n_tokens=len(chunk), chunk_rows=plan.T, gpu_pass_s=one_pass, matmul_s=matmul_s,
                matmul_flops=matmul_flops, matmul_tflops=matmul_flops / matmul_s / 1e12 if matmul_s > 0 else None)
    return prof


# -- description and rendering ----------------------------------------------------------------------------
def _describe_model(engine: Engine, path: Path) -> dict[str, Any]:
    meta = engine.model.metadata
    ft = meta.get("general.file_type")
    try:
        file_type = LlamaFileType(ft).name.removeprefix("MOSTLY_") if ft is not None else None
    except ValueError:
        file_type = str(ft)
    return {"model": str(path), "name": meta.get("general.name") or path.stem,
            "architecture": engine.model.arch, "file_type": file_type,
            "file_bytes": sum(p.stat().st_size for p in engine.model.shards)}


def _device_name(engine: Engine) -> str:
    if engine.backend.resident is not None:
        info = engine.backend.resident.dev.info()
        dots = "int8" if info["int8_dots"] else "float"
        gemm = (f"{dots} dots in GEMV, matrix units in prefill GEMM (narrow quantized outputs: {dots} dots)"
                if info["mma"] else f"{dots} dots in GEMV and GEMM")
        checks = "" if info["robust"] else "; no shader bounds checks"
        return f"{info['name']} ({info['backend']} through {info['webgpu']}; {gemm}{checks})"
    return "CPU (numpy)"


def _size(n: float) -> str:
    """Bytes as in tables: "4.58 GiB", "374 MiB", "12.0 KiB"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}" if v < 100 else f"{v:,.0f} {unit}"
    return f"{n:.0f} B"


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def _label(test: dict[str, Any], kind: str) -> str:
    """llama-bench's test labels: pp512, tg128, tg128 @ d4096."""
    depth = test.get("depth", 0)
    return f"{kind}{test['n_tokens']}" + (f" @ d{depth}" if depth else "")


def to_markdown(r: dict[str, Any]) -> str:
    """A result of :func:`run_bench` as markdown: the results table, a summary, and profiles if taken."""
    label = f"{r['name']} {r['file_type'] or ''}".strip()
    roof = f" % of {r['roofline_gbs']:,.0f} GB/s |" if r.get("roofline_gbs") else ""
    lines = [f"| model | size | backend | test | t/s | min | max | GB/s |{roof}",
             "|---|---:|---|---|---:|---:|---:|---:|" + ("---:|" if roof else "")]
    size = _size(r["file_bytes"])
    for p in r.get("pp_depths") or ([r["pp"]] if r["pp"] is not None else []):
        lines.append(f"| {label} | {size} | {r['backend']} | {_label(p, 'pp')} | {_rate(p['tokens_per_s'])} | "
                     f"{_rate(p['min'])} | {_rate(p['max'])} | |" + (" |" if roof else ""))
    for t in r["tg"]:
        lines.append(f"| {label} | {size} | {r['backend']} | {_label(t, 'tg')} | {_rate(t['tokens_per_s'])} | "
                     f"{_rate(t['min'])} | {_rate(t['max'])} | {t['gbs']:,.1f} |"
                     + (f" {t['roofline_pct']:.1f} |" if roof else ""))
    mem = r["memory_bytes"]
    lines += ["", f"- device: {r['device']}; n_ctx {r['n_ctx']}; median of {r['reps']} runs after a warm-up; "
                  f"sampling {'greedy' if r['temperature'] == 0 else 'temperature ' + format(r['temperature'], 'g')}",
              f"- load: {r['load_s']:.2f} s from model open to the first token ({r['engine_load_s']:.2f} s "
              f"to plans loaded)",
              f"- memory: {_size(mem)} in our buffers ({mem / r['file_bytes']:.2f}x the "
              f"{_size(r['file_bytes'])} file); weights as stored {_size(r['weight_bytes'])}",
              f"- {'dispatches' if r['backend'] == 'wgpu' else 'ops (the host sampler included)'} per decode "
              f"step: {r['dispatches_per_step']}"]
    if roof:
        source = {"given": "--roofline-gbs", "spec": "the vendor's peak for this device"}.get(
            r.get("roofline_source") or "given", r.get("roofline_source"))
        lines.append(f"- roofline: {r['roofline_gbs']:,.0f} GB/s ({source})")
    if r["pp"] is not None and r["pp"].get("profile") is not None:
        lines += ["", *_prefill_profile_markdown(r["pp"], _label(r["pp"], "pp"))]
    for t in r["tg"]:
        if t["profile"] is not None:
            lines += ["", *_profile_markdown(t, _label(t, "tg"))]
    return "\n".join(lines) + "\n"


def _tflops(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def _prefill_profile_markdown(t: dict[str, Any], name: str) -> list[str]:
    p = t["profile"]
    how = {"timestamp": "GPU timestamps, one pass per node", "wall": "wall clock per op or node"}[p["source"]]
    lines = [f"Where the time goes, {name}: one {p['n_tokens']}-token prefill chunk at position 0, {p['chunk_rows']} "
             f"rows ({how})", "",
             "| kernel family | dispatches | us | % of chunk |", "|---|---:|---:|---:|"]
    lines += [f"| {row['family']} | {row['dispatches']} | {row['seconds'] * 1e6:,.1f} | {row['percent']:.1f} |"
              for row in p["rows"]]
    lines += ["", "| op (family) | input shapes | nodes | dispatches | us/node | % of chunk | TFLOP/s |",
              "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {n['op']} ({n['family']}) | {n['shapes']} | {n['nodes']} | {n['dispatches']} | "
              f"{n['seconds'] / n['nodes'] * 1e6:,.1f} | {n['percent']:.1f} | "
              f"{_tflops(n['tflops'])} |" for n in p["nodes"]]
    extra = f"sum {p['step_s'] * 1e3:,.2f} ms"
    if p["gpu_pass_s"] is not None:
        extra += f"; the chunk as one pass {p['gpu_pass_s'] * 1e3:,.2f} ms GPU"
    if p["matmul_tflops"] is not None:
        extra += (f"; matmuls {p['matmul_s'] * 1e3:,.2f} ms, {p['matmul_flops'] / 1e9:,.1f} GFLOP, "
                  f"{p['matmul_tflops']:.2f} TFLOP/s")
    return [*lines, "", f"{extra}; pp wall time {p['n_tokens'] / t['tokens_per_s'] * 1e3:,.2f} ms per chunk"]


def _profile_markdown(t: dict[str, Any], name: str) -> list[str]:
    p = t["profile"]
    how = {"timestamp": "GPU timestamps, one pass per node", "wall": "wall clock per op or node"}[p["source"]]
    lines = [f"Where the time goes, {name}: one decode step at position {p['position']} ({how})", "",
             "| kernel family | dispatches/step | us/step | % of step |", "|---|---:|---:|---:|"]
    lines += [f"| {row['family']} | {row['dispatches']} | {row['seconds'] * 1e6:,.1f} | {row['percent']:.1f} |"
              for row in p["rows"]]
    nodes = p.get("nodes") or []
    in_step = bool(nodes) and all(n.get("in_step_s") is not None for n in nodes)
    if nodes:
        extra = (" in step, us/node |", "---:|") if in_step else ("", "")
        lines += ["", "| op (family) | input shapes | nodes | dispatches | us/node | % of step |" + extra[0],
                  "|---|---|---:|---:|---:|---:|" + extra[1]]
        lines += [f"| {n['op']} ({n['family']}) | {n['shapes']} | {n['nodes']} | {n['dispatches']} | "
                  f"{n['seconds'] / n['nodes'] * 1e6:,.1f} | {n['percent']:.1f} |"
                  + (f" {n['in_step_s'] / n['nodes'] * 1e6:,.1f} |" if in_step else "") for n in nodes]
        if in_step:
            lines += ["", "in step: the whole step as one pass less the step with those nodes left out, per node "
                      f"(together {sum(n['in_step_s'] for n in nodes) * 1e6:,.1f} us; 0: below the timing noise)"]
    wall = 1e6 / t["tokens_per_s"]
    extra = f"sum {p['step_s'] * 1e6:,.1f} us"
    if p["gpu_pass_s"] is not None:
        extra += (f"; whole step as one pass {p['gpu_pass_s'] * 1e6:,.1f} us GPU; host encode "
                  f"{p['host_encode_s'] * 1e6:,.1f} us and submit {p['submit_s'] * 1e6:,.1f} us per step")
    return [*lines, "", f"{extra}; tg wall time {wall:,.1f} us per token"]
