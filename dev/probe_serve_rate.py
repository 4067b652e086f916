"""The all-decoding rate of B concurrent requests without HTTP: AsyncLLM in this process (the server's
engine and scheduler), B streams of greedy requests on random prompts, the window from the latest first
token to the earliest last one (as dev/load_server.py measures it through HTTP). Beside `oxigpu bench
--batch B` (which drives the backend's resident loop directly) and the HTTP load test, it says which layer
a gap between them lives in.

    python3 dev/probe_serve_rate.py -m 8b.gguf --backend wgpu --clients 64 --prompt-tokens 128 \
        --max-tokens 256 --n-ctx 2048 [--kv-memory 8GiB]
"""
from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from oxigpu import SamplingParams
from oxigpu.aio import AsyncLLM
from oxigpu.cli.serve import parse_size


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--kv-memory", default=None)
    a = ap.parse_args()
    t = time.perf_counter()
    llm = AsyncLLM(a.model, backend=a.backend, n_ctx=a.n_ctx, max_seqs=a.clients, max_queue=4 * a.clients,
                   kv_memory=parse_size(a.kv_memory) if a.kv_memory else None, warmup=True)
    st = llm.stats()
    print(f"loaded and warmed up in {time.perf_counter() - t:.1f} s; KV pool {st.kv_blocks_total} blocks")
    rng = np.random.default_rng(0)
    eog = {t: float("-inf") for t in llm.tokenizer.eog_ids}
    params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0, logit_bias=eog)

    async def one(prompt: list[int]) -> list[tuple[float, int]]:
        got = []
        async with llm.stream(prompt, params) as events:
            async for ev in events:
                if ev.token_ids:
                    got.append((time.perf_counter(), len(ev.token_ids)))
        return got

    for rep in range(2):          # the first is a warm-up of the whole path
        prompts = rng.integers(100, llm.tokenizer.vocab_size - 1000, (a.clients, a.prompt_tokens)).tolist()
        t0 = time.perf_counter()
        runs = await asyncio.gather(*(one(p) for p in prompts))
        wall = time.perf_counter() - t0
        lo = max(r[0][0] for r in runs)
        hi = min(r[-1][0] for r in runs)
        n = sum(k for r in runs for tt, k in r if lo < tt <= hi)
        total = sum(k for r in runs for _, k in r)
        events = sum(len(r) for r in runs)
        print(f"run {rep}: {a.clients} streams, {total} tokens in {wall:.2f} s ({total / wall:,.0f} tok/s whole run); "
              f"all decoding {n / (hi - lo):,.0f} tok/s over {hi - lo:.2f} s; {total / events:.1f} tokens per event")
    await llm.close()


if __name__ == "__main__":
    asyncio.run(main())
