"""`oxigpu serve`: one model behind an OpenAI-compatible HTTP API (see oxigpu/server).

The port is bound first (a taken port fails at once), the model loads while /health answers "loading", and
one line on stdout says where the server listens once it is ready. Ctrl-C (or SIGTERM) shuts it down.
"""
from __future__ import annotations

import os
import re
import sys

import click

from ..runtime.engine import BACKENDS
from .common import cache_options, friendly_errors, model_option, verbose_option

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'8GiB', '512M', '1.5G' or a number of bytes -> bytes (K, M, G and T are powers of 1024)."""
    m = _SIZE.match(text)
    if m is None:
        raise click.BadParameter(f"{text!r} is not a size (e.g. 8GiB, 512MiB or a number of bytes)")
    value = float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
    if value < 1:
        raise click.BadParameter(f"{text!r} must be at least one byte")
    return int(value)


@click.command("serve")
@model_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 exposes the server to the network: set --api-key).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0: a free port.")
@click.option("--api-key", envvar="OXIGPU_API_KEY", default=None,
              help="Require 'Authorization: Bearer KEY' on every route but /health [env OXIGPU_API_KEY].")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True)
@click.option("--n-ctx", "n_ctx", type=int, default=None, help="Context window per sequence (default 4096).")
@click.option("--max-seqs", type=click.IntRange(1), default=8, show_default=True,
              help="Requests generating at once; more wait in the queue.")
@click.option("--max-queue", type=click.IntRange(0), default=64, show_default=True,
              help="Requests waiting for a slot; beyond that, 429 with Retry-After.")
@click.option("--kv-memory", default=None, help="KV-cache pool size, e.g. 4GiB (the batched engine's pool).")
@cache_options
@click.option("--timeout", "request_timeout", type=click.FloatRange(min=0.001), default=600.0, show_default=True,
              help="Seconds a request may take.")
@click.option("--max-body", default="4MiB", show_default=True, help="Largest request body.")
@click.option("--warmup/--no-warmup", default=True, show_default=True,
              help="Compile every batch size's plan before listening (--no-warmup: listen sooner, compile when a "
                   "batch first grows to a size, in the middle of serving).")
@verbose_option
@friendly_errors
def serve(model: str | None, host: str, port: int, api_key: str | None, backend: str, n_ctx: int | None,
          max_seqs: int, max_queue: int, kv_memory: str | None, request_timeout: float, max_body: str,
          verbose: bool, cache_type_k: str, cache_type_v: str, warmup: bool) -> None:
    """Serve a model over HTTP with OpenAI's API (chat, completions, streaming)."""
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise click.ClickException("the server needs its extra: pip install 'oxigpu[server]'") from None
    from ..aio import AsyncLLM
    from ..api import resolve_model_path
    from ..server import ServerConfig, ServerState, bind, create_app, url_of, uvicorn_server

    path = resolve_model_path(model)
    kv_bytes = parse_size(kv_memory) if kv_memory is not None else None
    config = ServerConfig(api_key=api_key or None, max_body=parse_size(max_body), request_timeout=request_timeout)
    sock = bind(host, port)
    url = url_of(sock)
    label = f"loading {path.name}"

    def progress(stage: str, done: int, total: int) -> None:
        click.echo(f"\r{label}: {stage} ({done}/{total})\033[K", err=True, nl=False)

    def loader() -> AsyncLLM:
        return AsyncLLM(path, backend=backend, n_ctx=n_ctx, max_seqs=max_seqs, kv_memory=kv_bytes,
                        max_queue=max_queue, progress=progress, cache_type_k=cache_type_k,
                        cache_type_v=cache_type_v, warmup=warmup)

    failed: list[str] = []

    def loaded(state: ServerState) -> None:
        click.echo("", err=True)
        if state.llm is None:
            failed.append(state.error or "unknown error")
            server.should_exit = True
            return
        llm = state.llm
        if api_key is None and host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"warning: listening on {host} without an API key: anyone who can reach it can use it",
                       err=True)
        click.echo(f"oxigpu serve: {path.name} ({llm.arch}, {llm.backend}, n_ctx {llm.n_ctx}, "
                   f"{max_seqs} at once) listening on {url} (OpenAI API at {url}/v1)")
        sys.stdout.flush()

    server = uvicorn_server(create_app(loader, config, on_loaded=loaded), verbose=verbose)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    server.run(sockets=[sock])
    if failed:
        raise click.ClickException(f"the model failed to load: {failed[0]}")
