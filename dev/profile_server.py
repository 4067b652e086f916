"""Where the server's time goes under load: `oxigpu serve`'s app in this process (uvicorn in a thread, as
BackgroundServer runs it) with cProfile in the AsyncLLM worker thread and in the server thread, driven by
dev/load_server.py's client at one concurrency level (N = C, streaming), then the same engine's batched
bench on the same workload for the rate to compare with.

    python3 dev/profile_server.py -m 8b.gguf --backend wgpu --clients 64 --max-tokens 128 --n-ctx 2048

Prints the all-decoding rate, each thread's top functions by own time, and the worker's time split between
waiting for the GPU's ids (the resident loop's read) and everything else.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import pstats
import sys
import threading
import time
from pathlib import Path

from oxigpu import aio
from oxigpu.server import BackgroundServer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("load_server", Path(__file__).with_name("load_server.py"))
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)

    profiles: dict[str, cProfile.Profile] = {}
    run = aio.AsyncLLM._run

    def profiled_run(self: aio.AsyncLLM) -> None:
        p = profiles.setdefault("worker", cProfile.Profile())
        p.enable()
        try:
            run(self)
        finally:
            p.disable()

    aio.AsyncLLM._run = profiled_run
    server = BackgroundServer(lambda: aio.AsyncLLM(a.model, backend=a.backend, n_ctx=a.n_ctx, max_seqs=a.clients,
                                                   max_queue=4 * a.clients))
    serve = server._server.run

    def profiled_serve(**kw: object) -> None:
        p = profiles.setdefault("server", cProfile.Profile())
        p.enable()
        try:
            serve(**kw)
        finally:
            p.disable()

    server._thread = threading.Thread(target=profiled_serve, kwargs={"sockets": [server._sock]}, daemon=True)
    with server:
        asyncio.run(load.level(server.base_url, None, "x", 1, 1, a.prompt_tokens, 4))        # warm-up (profiled too)
        t = time.perf_counter()
        r = asyncio.run(load.level(server.base_url, None, "x", a.clients, a.clients, a.prompt_tokens, a.max_tokens))
        wall = time.perf_counter() - t
    print(f"{a.clients} clients: {r['ok']} ok, {r['tok_per_s']:,.0f} generated tok/s over {wall:.2f} s, "
          f"{r['decode_tok_per_s']:,.0f} tok/s while all decode ({r['decode_window_s']:.2f} s)")
    for name, p in profiles.items():
        st = pstats.Stats(p)
        total = sum(v[2] for v in st.stats.values())
        print(f"\n== {name} thread: {total:.2f} s of own time in profiled functions")
        st.sort_stats("tottime").print_stats(a.top)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
