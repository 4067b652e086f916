"""`oxigpu embed`: embedding vectors of texts, from an embedding model (bert, nomic-bert) or, pooled, from a
decoder (--pooling last|mean)."""
from __future__ import annotations

import json
import sys

import click

from ..runtime.embed import POOLINGS
from .common import friendly_errors, load_options


@click.command("embed")
@click.argument("texts", nargs=-1)
@load_options
@click.option("--pooling", type=click.Choice(POOLINGS), default=None,
              help="How token states become one vector (default: the file's; 'last' for decoders).")
@click.option("--no-normalize", is_flag=True, help="Keep the raw pooled vectors (default: unit length).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of vectors instead of text lines.")
@friendly_errors
def embed(texts: tuple[str, ...], model: str | None, backend: str, n_ctx: int | None, verbose: bool,
          pooling: str | None, no_normalize: bool, as_json: bool) -> None:
    """Print the embedding of each TEXT (none, or '-': one text per line of stdin)."""
    from ..api import resolve_model_path
    from ..errors import InvalidParameterError
    from ..runtime.embed import Embedder
    items = list(texts)
    if not items or items == ["-"]:
        items = [line for line in sys.stdin.read().splitlines() if line.strip()]
    if not items:
        raise InvalidParameterError("no text to embed (give TEXT arguments or lines on stdin)")
    emb = Embedder(resolve_model_path(model), backend=backend, n_ctx=n_ctx, pooling=pooling)
    vecs = emb.embed(items, normalize=not no_normalize)
    if as_json:
        click.echo(json.dumps([[round(float(x), 7) for x in v] for v in vecs]))
        return
    for i, v in enumerate(vecs):
        click.echo(f"embedding {i}: " + " ".join(f"{x:.6f}" for x in v))
