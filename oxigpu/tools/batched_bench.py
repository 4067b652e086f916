"""Aggregate throughput of many sequences at once, measured as llama.cpp's ``llama-batched-bench`` does
(``oxigpu bench --batch 1,4,16,64``).

For each batch size B: B sequences, each of ``npp`` random prompt tokens (distinct prompts, nothing shared),
are evaluated into an empty cache in mixed steps of the engine's step rows (prompt processing, PP), then
``ntg`` decode steps run with one row per sequence (text generation, TG). TG runs where serving runs it: on
a backend with the GPU-resident loop, there (each step's greedy draw, an argmax on the device, feeds the
next; the host reads the ids a batch of steps at a time), else step by step from the host with the next
random id as each step's token, as llama-batched-bench feeds them. Reported per B (llama-batched-bench's
columns): PP, TG, B, N_KV = B * (npp + ntg), T_PP / S_PP = B * npp / T_PP, T_TG / S_TG = B * ntg / T_TG,
T = T_PP + T_TG, S = N_KV / T.
Each B runs ``reps`` times after a warm-up of one whole run (as llama-batched-bench warms up): every plan of
that B (the mixed plans of its prompt steps, its decode bucket and resident loop, the attention grids of every
position) is built and has run once before the clock starts, and Python's cyclic garbage collector is
collected before and paused during the timed runs (building plans leaves many objects behind, and a full
collection inside a timed step would be charged to it). The median run (by T) is reported, with its first
prompt step's time (``t_pp_first``: a B whose S_PP dips shows there whether one step took it).

The engine is built for the largest B: ``max_seqs`` = max(B), a context of npp + ntg tokens and a KV pool of
exactly max(B) such contexts. Steps go through ``Engine.forward`` and the resident loop on the plans the
scheduler uses (decode buckets, the mixed plan), so they time what serving many requests runs, less the
scheduler's per-token host work (detokenizing, stop strings).
"""
from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.base import Step
from ..errors import InvalidParameterError
from ..gguf import GGUFFile
from ..models import HParams
from ..quant import kvcache as kvq
from ..runtime.engine import Engine
from ..runtime.kvcache import SeqBlocks, block_bytes, blocks_for
from ..runtime.sampling import SamplerConfig, pack_batch

Log = Callable[[str], None]


def run_batched_bench(model_path: str | Path, *, n_prompt: int = 512, n_gen: int = 128,
                      batches: Sequence[int] = (1, 4, 16, 64), reps: int = 1, backend: str = "auto", seed: int = 0,
                      log: Log | None = None, cache_type_k: str = "f16", cache_type_v: str = "f16",
                      n_ctx: int | None = None) -> dict[str, Any]:
    """Load the model once and measure every batch size (see the module docstring); a JSON-ready dict.
    ``cache_type_k`` / ``_v``: the KV cache's types (llama-batched-bench's -ctk / -ctv). ``n_ctx``: the
    context each sequence is given (default npp + ntg), e.g. a server's, whose plans are sized by it."""
    say = log or (lambda line: None)
    batches = sorted(set(batches))
    if not batches or batches[0] < 1 or n_prompt < 1 or n_gen < 1 or reps < 1:
        raise InvalidParameterError(f"need batch sizes >= 1, npp >= 1, ntg >= 1 and reps >= 1 (got {batches}, "
                                    f"{n_prompt}, {n_gen}, {reps})")
    n_seq = n_prompt + n_gen
    if n_ctx is not None and n_ctx < n_seq:
        raise InvalidParameterError(f"n_ctx {n_ctx} is less than npp + ntg = {n_seq}")
    n_ctx = n_ctx or n_seq
    t0 = time.perf_counter()
    hp = HParams.from_gguf(GGUFFile(model_path))
    per_block = block_bytes(hp, kvq.check_type(cache_type_k, "cache_type_k"),
                            kvq.check_type(cache_type_v, "cache_type_v"))
    engine = Engine(model_path, backend=backend, n_ctx=n_ctx, max_seqs=batches[-1],
                    kv_memory=batches[-1] * blocks_for(n_ctx) * per_block, cache_type_k=cache_type_k,
                    cache_type_v=cache_type_v)
    if engine.max_seqs < batches[-1]:
        raise InvalidParameterError(f"the {engine.backend_name} backend runs at most {engine.max_seqs} sequences "
                                    f"per step here; B={batches[-1]} was asked")
    say(f"loaded {Path(model_path).name} on {engine.backend_name} in {time.perf_counter() - t0:.2f} s "
        f"(n_ctx {n_ctx}, {engine.pool.n_blocks} KV blocks)")
    rng = np.random.default_rng(seed)
    rows = []
    for b in batches:
        ids = rng.integers(0, engine.vocab_size, (b, n_seq)).tolist()
        _run(engine, ids, n_prompt, n_gen)                         # warm-up: every plan of this B built and run
        runs = _timed(lambda ids=ids: [_run(engine, ids, n_prompt, n_gen) for _ in range(reps)])
        t_pp, t_tg, t_first = sorted(runs, key=lambda r: r[0] + r[1])[len(runs) // 2]
        row = {"pp": n_prompt, "tg": n_gen, "b": b, "n_kv": b * n_seq, "t_pp": t_pp, "s_pp": b * n_prompt / t_pp,
               "t_tg": t_tg, "s_tg": b * n_gen / t_tg, "t": t_pp + t_tg, "s": b * n_seq / (t_pp + t_tg),
               "t_pp_first": t_first, "runs": [list(r) for r in runs]}
        rows.append(row)
        say(f"B={b}: S_PP {row['s_pp']:,.1f} t/s, S_TG {row['s_tg']:,.1f} t/s, S {row['s']:,.1f} t/s")
    return {"model": str(model_path), "backend": engine.backend_name, "n_prompt": n_prompt, "n_gen": n_gen,
            "n_ctx": n_ctx, "reps": reps, "step_rows": engine.step_rows, "rows": rows}


def _timed(fn: Callable[[], Any]) -> Any:
    """``fn()`` with the cyclic garbage collector collected first and paused while it runs."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if was:
            gc.enable()


def _run(engine: Engine, ids: list[list[int]], n_prompt: int, n_gen: int) -> tuple[float, float, float]:
    """One PP + TG run of len(ids) sequences; (T_PP, T_TG, the first PP step's time) in seconds. Blocks are
    freed after."""
    b = len(ids)
    seqs = [SeqBlocks() for _ in range(b)]
    with engine.lock:
        engine.forget()
        try:
            for s in seqs:
                if not engine.pool.grow(s, n_prompt + n_gen):
                    raise InvalidParameterError("the KV pool cannot hold the batch")   # sized for it above
            t = time.perf_counter()
            t_first = None
            done = [0] * b
            while min(done) < n_prompt:           # prompts in mixed steps of the engine's step rows
                budget, chunks = engine.step_rows, []
                for i in range(b):
                    take = min(n_prompt - done[i], budget)
                    if take and len(chunks) < engine.max_seqs:
                        chunks.append((i, done[i], take))
                        budget -= take
                step = Step.batch([(ids[i][p:p + n], p, seqs[i].blocks) for i, p, n in chunks])
                for i, _, n in chunks:
                    done[i] += n
                # logits read on the first step (its time) and the last (T_PP ends when all are in); the
                # steps between queue without a round trip, as llama_decode's batches do
                engine.forward(step, decode=False, read=t_first is None or min(done) >= n_prompt)
                if t_first is None:
                    t_first = time.perf_counter() - t
            t_pp = time.perf_counter() - t
            t = time.perf_counter()
            if engine.backend.resident is not None:
                _tg_resident(engine, [row[:n_prompt + 1] for row in ids], [s.blocks for s in seqs], n_gen)
            else:
                for j in range(n_gen):
                    pos = n_prompt + j
                    engine.forward(Step.batch([(ids[i][pos:pos + 1], pos, seqs[i].blocks) for i in range(b)]),
                                   decode=True)
            t_tg = time.perf_counter() - t
        finally:
            for s in seqs:
                engine.pool.release(s)
            engine.forget()
    return t_pp, t_tg, t_first or 0.0


def _tg_resident(engine: Engine, contexts: list[list[int]], tables: list[list[int]], n_gen: int) -> None:
    """``n_gen`` decode steps of every sequence on the GPU-resident loop (the path the scheduler runs while
    no sequence joins or leaves): greedy draws feed the next step on the device; the host reads the ids a
    batch of steps at a time."""
    b = len(contexts)
    bucket = engine.decode_bucket(b)
    cfgs = [SamplerConfig(temperature=0.0)] * bucket
    slots = pack_batch(cfgs, [len(c) for c in contexts] + [1] * (bucket - b), [0] * bucket, vocab=engine.vocab_size)
    got = sum(len(ids) for ids, _ in engine.backend.resident.decode_batch(
        engine.plan("decode", bucket, bucket), contexts, slots, n_gen, tables))
    if got != n_gen:
        raise RuntimeError(f"the resident loop ran {got} of {n_gen} steps")


def to_markdown(r: dict[str, Any]) -> str:
    """llama-batched-bench's table."""
    lines = [f"model: {Path(r['model']).name}, backend {r['backend']}, step rows {r['step_rows']}, "
             f"median of {r['reps']} run(s)", "",
             "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |",
             "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"]
    for x in r["rows"]:
        lines.append(f"| {x['pp']:5d} | {x['tg']:6d} | {x['b']:4d} | {x['n_kv']:6d} | {x['t_pp']:8.3f} | "
                     f"{x['s_pp']:8.2f} | {x['t_tg']:8.3f} | {x['s_tg']:8.2f} | {x['t']:8.3f} | {x['s']:8.2f} |")
    return "\n".join(lines) + "\n"

