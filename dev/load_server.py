"""Load test of `oxigpu serve` through HTTP with the official OpenAI client (async, streaming).

At each concurrency level, N requests run with exactly C in flight (a new one starts as one ends); each is a
streamed completion of a distinct prompt of about --prompt-tokens tokens, generating exactly --max-tokens
tokens (ignore_eos). Per level: wall time, aggregate generation tokens/s (completion tokens / wall; prompts'
prefill included), where N equals C the generation rate while all C decode at once (the phase a batched
bench's S_TG times), time to first token and inter-token latency p50/p99 as the client sees them (chunk
arrival times; ITL is the gap between chunks divided by the tokens they carry),
and the server's own histograms (from /metrics).

    python dev/load_server.py -m model.gguf --backend wgpu --max-seqs 64 --concurrency 1,8,32,64 --requests 64
    python dev/load_server.py --url http://127.0.0.1:8080/v1 --concurrency 1,8 --requests 16   # a running server

With -m it starts `oxigpu serve` on a free port (its options after --serve-args) and stops it at the end.
Results print as a markdown table; --json FILE writes them too.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

from openai import AsyncOpenAI


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def server_histograms(url: str, key: str | None) -> dict[str, dict[float, float]]:
    """Cumulative bucket counts of the server's latency histograms: {name: {le: count}}."""
    req = urllib.request.Request(url.removesuffix("/v1") + "/metrics",
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    out: dict[str, dict[float, float]] = {}
    for m in re.finditer(r'^(oxigpu_\w+)_bucket\{le="([^"]+)"\} (\S+)$', text, re.MULTILINE):
        out.setdefault(m.group(1), {})[float(m.group(2))] = float(m.group(3))
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The q-quantile's bucket bound over the observations made between two scrapes."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1] if counts else 0
    for le, c in counts:
        if total and c >= q * total:
            return le
    return float("nan")


async def one(client: AsyncOpenAI, model: str, prompt: str, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    times, pieces, usage, counts = [], [], None, []
    # continuous_usage_stats (vLLM's option, oxigpu's too): each chunk says how many tokens came so far, so
    # the decode window counts exact tokens (a chunk carries a batch of steps' tokens, not a fixed number)
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                             stream=True, stream_options={"include_usage": True,
                                                                          "continuous_usage_stats": True},
                                             extra_body={"ignore_eos": True})
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].text:
            times.append(time.perf_counter())
            pieces.append(chunk.choices[0].text)
            counts.append(chunk.usage.completion_tokens if chunk.usage is not None else None)
    tokens = usage.completion_tokens if usage else len(pieces)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # tokens per chunk is about tokens / chunks; spread each gap over them
    per_chunk = max(1.0, (tokens - 1) / max(1, len(gaps)))
    return {"ttft": times[0] - t0 if times else float("nan"), "itl": [g / per_chunk for g in gaps],
            "tokens": tokens, "s": time.perf_counter() - t0, "times": times,
            "counts": counts if counts and None not in counts else None,
            "per_chunk": tokens / len(times) if times else 0.0}


def decode_rate(results: list[dict]) -> tuple[float, float]:
    """Tokens/s while every request of the level is decoding, from the latest first token to the earliest
    last token (the phase llama-batched-bench's S_TG and `oxigpu bench --batch`'s S_TG time: all sequences
    generating, none prefilling), and that window's length; (nan, 0) where the requests never overlapped."""
    if not results or any(not r["times"] for r in results):
        return float("nan"), 0.0
    lo = max(r["times"][0] for r in results)
    hi = min(r["times"][-1] for r in results)
    if hi <= lo:
        return float("nan"), 0.0
    n = 0.0
    for r in results:
        if r["counts"] is None:      # a server without per-chunk counts: its mean tokens per chunk
            n += r["per_chunk"] * sum(1 for t in r["times"] if lo < t <= hi)
            continue
        upto = [c for t, c in zip(r["times"], r["counts"]) if t <= hi]
        before = [c for t, c in zip(r["times"], r["counts"]) if t <= lo]
        n += upto[-1] - before[-1]
    return n / (hi - lo), hi - lo


async def level(url: str, key: str | None, model: str, concurrency: int, n: int, prompt_tokens: int,
                max_tokens: int) -> dict:
    client = AsyncOpenAI(base_url=url, api_key=key or "none", max_retries=0, timeout=3600)
    words = " ".join(["the quick brown fox jumps over the lazy dog"] * max(1, prompt_tokens // 9))
    sem = asyncio.Semaphore(concurrency)
    errors: list[str] = []

    async def guarded(i: int) -> dict | None:
        async with sem:
            try:
                return await one(client, model, f"Request {i}: {words}", max_tokens)
            except Exception as e:            # counted, not fatal: the table says how many failed
                errors.append(f"{type(e).__name__}: {e}")
                return None

    before = server_histograms(url, key)
    t0 = time.perf_counter()
    results = [r for r in await asyncio.gather(*(guarded(i) for i in range(n))) if r is not None]
    wall = time.perf_counter() - t0
    after = server_histograms(url, key)
    await client.close()
    ttft = [r["ttft"] for r in results]
    itl = [g for r in results for g in r["itl"]]
    tokens = sum(r["tokens"] for r in results)
    rate, window = decode_rate(results) if n == concurrency else (float("nan"), 0.0)
    ttft_h = "oxigpu_time_to_first_token_seconds"
    itl_h = "oxigpu_inter_token_latency_seconds"
    return {"concurrency": concurrency, "requests": n, "ok": len(results), "errors": len(errors),
            "first_error": errors[0] if errors else None, "wall_s": wall, "tokens": tokens,
            "tok_per_s": tokens / wall if wall > 0 else 0.0, "decode_tok_per_s": rate, "decode_window_s": window,
            "ttft_p50": quantile(ttft, 0.5), "ttft_p99": quantile(ttft, 0.99),
            "itl_p50": quantile(itl, 0.5), "itl_p99": quantile(itl, 0.99),
            "itl_mean": statistics.fmean(itl) if itl else float("nan"),
            "server_ttft_p50_le": bucket_quantile(before.get(ttft_h, {}), after.get(ttft_h, {}), 0.5),
            "server_itl_p50_le": bucket_quantile(before.get(itl_h, {}), after.get(itl_h, {}), 0.5),
            "server_itl_p99_le": bucket_quantile(before.get(itl_h, {}), after.get(itl_h, {}), 0.99)}


def start_server(model: str, extra: list[str], key: str | None) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, **({"OXIGPU_API_KEY": key} if key else {})}
    proc = subprocess.Popen([sys.executable, "-m", "oxigpu", "serve", "-m", model, "--port", "0", *extra],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"OpenAI API at (\S+)\)", line)
    if not m:
        proc.kill()
        sys.exit(f"the server did not start: {line!r}")
    print(line.strip(), file=sys.stderr)
    return proc, m.group(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("-m", "--model", help="start `oxigpu serve` on this GGUF file")
    where.add_argument("--url", help="base URL of a running server (ending in /v1)")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--max-seqs", type=int, default=64)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="more `oxigpu serve` options")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--requests", type=int, default=64, help="requests per concurrency level")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--api-key", default=os.environ.get("OXIGPU_API_KEY"))
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    proc = None
    url = args.url
    if args.model:
        max_queue = max(64, args.requests)
        proc, url = start_server(args.model, ["--backend", args.backend, "--max-seqs", str(args.max_seqs),
                                              "--n-ctx", str(args.n_ctx), "--max-queue", str(max_queue),
                                              *args.serve_args], args.api_key)
    try:
        model = "x"
        rows = []
        asyncio.run(level(url, args.api_key, model, 1, 1, args.prompt_tokens, 4))     # warm-up
        for c in (int(x) for x in args.concurrency.split(",")):
            rows.append(asyncio.run(level(url, args.api_key, model, c, args.requests, args.prompt_tokens,
                                          args.max_tokens)))
            r = rows[-1]
            print(f"c={c}: {r['tok_per_s']:.1f} tok/s, ttft p50 {r['ttft_p50'] * 1e3:.0f} ms, "
                  f"itl p50 {r['itl_p50'] * 1e3:.1f} ms, {r['errors']} errors", file=sys.stderr)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"\nprompt ~{args.prompt_tokens} tokens, {args.max_tokens} generated per request, "
          f"{args.requests} requests per level\n")
    print("| clients | ok/err | wall s | gen tok/s | all decoding, tok/s (window s) | TTFT p50 / p99 ms "
          "| ITL p50 / p99 ms | server ITL p50 / p99 <= ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['ok']}/{r['errors']} | {r['wall_s']:.1f} | {r['tok_per_s']:.1f} | "
              f"{r['decode_tok_per_s']:.1f} ({r['decode_window_s']:.2f}) | "
              f"{r['ttft_p50'] * 1e3:.0f} / {r['ttft_p99'] * 1e3:.0f} | {r['itl_p50'] * 1e3:.1f} / "
              f"{r['itl_p99'] * 1e3:.1f} | {r['server_itl_p50_le'] * 1e3:g} / {r['server_itl_p99_le'] * 1e3:g} |")
    if any(r["first_error"] for r in rows):
        print("\nfirst error:", next(r["first_error"] for r in rows if r["first_error"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
