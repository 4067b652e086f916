#!/usr/bin/env python3
"""Soak test: many generations with random settings on one LLM per backend, watching for leaks.

    python dev/soak.py                      # 1,000 generations on numpy, then on wgpu
    python dev/soak.py --n 200 --backend wgpu --shape tiny-qwen3

Each generation draws its kind (generate, stream, stream closed after a few pieces, chat, token-id prompt,
or a call with a deliberately invalid setting that must raise InvalidParameterError), its prompt (ASCII
words, mixed Unicode, bytes decoded with replacement, special-token strings, token ids, up to n_ctx - 1
tokens) and its sampling settings (temperature, top-k/p, min-p, penalties, stop strings, logit bias,
seed) from one seeded RNG, so a failing run can be replayed with the same --seed.

Every --every generations it samples the process RSS (VmRSS in /proc/self/status) and the live wgpu
buffers (Device.live_buffers()). It fails (exit 1) when, after the first --warmup generations, RSS grows by
more than --rss-bound MiB or the live buffer count changes at all. Not part of the test suite (minutes on
lavapipe); results go into docs/perf-log.md under "Soak".
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("LP_NUM_THREADS", "1")

from oxigpu import LLM  # noqa: E402
from oxigpu.errors import InvalidParameterError  # noqa: E402
from oxigpu.synth import synthesize  # noqa: E402

WORDS = ("the cat sat on a mat while quick brown foxes jumped over lazy dogs and seven ships sailed "
         "north under grey skies carrying tea silk and stories").split()
UNICODE = "éàüßçøåñ漢字かな한국어Ωπλ🙂🚀∑√∞—«»"
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<bos>")
INVALID = ({"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"max_tokens": -2}, {"top_k": -1},
           {"seed": -1}, {"stop": [""]}, {"min_p": 2.0}, {"repeat_penalty": 0.0}, {"temperature": float("nan")},
           {"logit_bias": {10**7: 1.0}})


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def random_text(rng: random.Random, max_words: int) -> str:
    kind = rng.random()
    if kind < 0.6:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words)))
    elif kind < 0.8:
        text = "".join(rng.choice(UNICODE + "abc ") for _ in range(rng.randint(1, max_words)))
    elif kind < 0.9:
        text = bytes(rng.randrange(256) for _ in range(rng.randint(1, max_words))).decode("utf-8", "replace")
    else:
        text = " ".join(rng.choice(WORDS + list(SPECIALS)) for _ in range(rng.randint(1, max_words)))
    return text or "x"


def random_params(rng: random.Random, vocab: int) -> dict:
    p: dict = {"max_tokens": rng.choice([0, 1, rng.randint(2, 16), rng.randint(8, 32), rng.randint(8, 32)]),
               "seed": rng.randrange(2**64)}
    if rng.random() < 0.2:
        p["temperature"] = 0.0
    else:
        p["temperature"] = rng.choice([0.3, 0.8, 1.0, 1.5, rng.uniform(0.05, 3.0)])
    p["top_k"] = rng.choice([0, 1, 5, 40, rng.randint(0, vocab + 10), 2**40])
    p["top_p"] = rng.choice([1.0, 0.95, rng.uniform(0.01, 1.0)])
    p["min_p"] = rng.choice([0.0, 0.05, rng.uniform(0.0, 0.5)])
    if rng.random() < 0.3:
        p["repeat_penalty"] = rng.uniform(0.8, 1.6)
        p["repeat_last_n"] = rng.choice([0, 8, 64, 2**40])
    if rng.random() < 0.2:
        p["presence_penalty"] = rng.uniform(-1.0, 1.0)
        p["frequency_penalty"] = rng.uniform(-1.0, 1.0)
    if rng.random() < 0.3:
        p["stop"] = [random_text(rng, 2)[:rng.randint(1, 4)] for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        n = rng.choice([1, 3, 20, 40])
        p["logit_bias"] = {rng.randrange(vocab): rng.choice([-100.0, -1.0, 2.0, 8.0, float("-inf")])
                           for _ in range(n)}
    return p


def one_generation(llm: LLM, rng: random.Random, stats: Counter) -> int:
    """Run one randomly chosen call; return the tokens it generated."""
    vocab = llm.tokenizer.vocab_size
    params = random_params(rng, vocab)
    kind = rng.choices(["generate", "stream", "close", "chat", "ids", "invalid"], [30, 20, 20, 10, 15, 5])[0]
    stats[kind] += 1
    if kind == "invalid":
        try:
            llm.generate(random_text(rng, 5), **{**params, **rng.choice(INVALID)})
        except InvalidParameterError:
            return 0
        raise AssertionError("an invalid setting was accepted")
    if kind == "chat":
        messages = [{"role": "user", "content": random_text(rng, 10)}]
        if rng.random() < 0.5:
            messages = [{"role": "system", "content": random_text(rng, 6)}, *messages,
                        {"role": "assistant", "content": random_text(rng, 6)},
                        {"role": "user", "content": random_text(rng, 6)}]
        result = llm.chat(messages, **params)
    elif kind == "ids":
        n = rng.choice([1, 2, rng.randint(3, 40), rng.randint(40, llm.n_ctx - 1)])
        result = llm.generate([rng.randrange(vocab) for _ in range(n)], **params)
    elif kind == "generate":
        result = llm.generate(random_text(rng, 30), **params)
    else:
        stream = llm.stream(random_text(rng, 30), **params)
        stop_after = rng.randint(0, 5) if kind == "close" else None
        if stop_after == 0:
            stream.close()                  # closed before its first token
        pieces = 0
        for _ in stream:
            pieces += 1
            if pieces == stop_after:
                stream.close()
                break
        if stream.result is None:
            stats["closed mid-stream"] += 1
            return len(getattr(stream, "generated", ()))
        result = stream.result
    stats[f"finish {result.finish_reason}"] += 1
    return len(result.token_ids)


def soak(backend: str, model: Path, n: int, every: int, warmup: int, rss_bound_mib: float, seed: int,
         n_ctx: int) -> bool:
    device = None
    if backend == "wgpu":
        from oxigpu.backends.wgpu.device import Device
        device = Device.get()
    rng = random.Random(seed)
    llm = LLM(model, backend=backend, n_ctx=n_ctx)
    # The wgpu backend builds one GPU-resident decode variant per logit-bias size class (16, 32, 64 ...
    # entries; at most log2(vocab) of them) and sampler kind (greedy or not) on first use: prime the ones
    # the soak draws, so that building them is not mistaken for a leak.
    for n_bias in (1, 20, 40):
        for temperature in (0.0, 1.0):
            llm.generate("prime", max_tokens=4, temperature=temperature,
                         logit_bias={t: 1.0 for t in range(n_bias)})
    stats: Counter = Counter()
    rows = []
    tokens, t0 = 0, time.perf_counter()
    for i in range(1, n + 1):
        tokens += one_generation(llm, rng, stats)
        if i % every == 0 or i == n:
            gc.collect()
            rows.append((i, time.perf_counter() - t0, tokens, rss_bytes(),
                         device.live_buffers() if device is not None else None))
    base = next((r for r in rows if r[0] >= warmup), rows[-1])
    print(f"\n## {backend}: {n} generations on {model.name} (n_ctx={n_ctx}, seed={seed}); baseline after "
          f"{base[0]} generations")
    print("| generations | elapsed s | tokens | RSS MiB | RSS growth MiB | live GPU buffers |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i, el, tok, rss, bufs in rows:
        growth = f"{(rss - base[3]) / 2**20:+.1f}" if i >= base[0] else ""
        print(f"| {i} | {el:.1f} | {tok} | {rss / 2**20:.1f} | {growth} | {'-' if bufs is None else bufs} |")
    after = [r for r in rows if r[0] >= base[0]]
    growth = max(r[3] for r in after) - base[3]
    buf_counts = {r[4] for r in after}
    ok_rss = growth <= rss_bound_mib * 2**20
    ok_buf = len(buf_counts) == 1
    elapsed = rows[-1][1]
    print(f"\n{backend}: {dict(sorted(stats.items()))}")
    print(f"{backend}: {tokens} tokens in {elapsed:.1f} s ({n / elapsed:.1f} generations/s); max RSS growth after "
          f"warm-up {growth / 2**20:+.1f} MiB (bound {rss_bound_mib} MiB): {'ok' if ok_rss else 'FAIL'}; "
          f"live GPU buffers {sorted(b for b in buf_counts if b is not None) or 'n/a'}: "
          f"{'ok' if ok_buf else 'FAIL (grew)'}")
    return ok_rss and ok_buf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="generations per backend (default 1000)")
    ap.add_argument("--backend", choices=["numpy", "wgpu", "both"], default="both")
    ap.add_argument("--shape", default="tiny-qwen3", help="synthetic model shape (oxigpu.synth.SHAPES)")
    ap.add_argument("--n-ctx", type=int, default=128)
    ap.add_argument("--every", type=int, default=50, help="sample RSS and buffers every this many generations")
    ap.add_argument("--warmup", type=int, default=100, help="generations before the baseline sample")
    ap.add_argument("--rss-bound", type=float, default=16.0, help="allowed RSS growth after warm-up, MiB")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = synthesize(args.shape, Path(tmp) / f"{args.shape}.gguf", seed=args.seed).path
        backends = ["numpy", "wgpu"] if args.backend == "both" else [args.backend]
        results = {b: soak(b, model, args.n, args.every, args.warmup, args.rss_bound, args.seed, args.n_ctx)
                   for b in backends}
    print("\nsoak:", ", ".join(f"{b} {'PASS' if ok else 'FAIL'}" for b, ok in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
