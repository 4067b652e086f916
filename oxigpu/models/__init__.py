"""Model builders: a GGUF file's architecture -> an op graph (see ``transformer.py`` for the block)."""
from __future__ import annotations

from typing import Literal

from ..errors import UnsupportedArchitectureError
from ..graph.fuse import fuse as fuse_graph
from ..graph.ir import Graph
from .gemma3 import GEMMA3
from .hparams import HParams
from .llama import LLAMA
from .qwen2 import QWEN2
from .qwen3 import QWEN3
from .transformer import Family, decoder

FAMILIES: dict[str, Family] = {f.name: f for f in (LLAMA, QWEN2, QWEN3, GEMMA3)}


def build_graph(model, hparams: HParams | None = None, T: int = 1, n_ctx: int = 2048,
                logits: Literal["last", "all"] = "last", fuse: bool = True) -> Graph:
    """The graph of ``model`` (an opened GGUFFile) for chunks of ``T`` tokens over a cache of ``n_ctx``.

    Input ``tokens`` i32[T]; output ``logits`` [1, vocab] for the last valid row or [T, vocab] for all.
    ``fuse`` applies ``oxigpu.graph.fuse`` (every backend runs the fused graph; off for comparisons).
    """
    arch = model.arch
    fam = FAMILIES.get(arch)
    if fam is None:
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported; supported: {', '.join(FAMILIES)}")
    hp = hparams if hparams is not None else HParams.from_gguf(model)
    g = decoder(fam, model, hp, T, n_ctx, logits)
    return fuse_graph(g) if fuse else g


__all__ = ["build_graph", "FAMILIES", "HParams"]
