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
                logits: Literal["last", "all"] = "last", fuse: bool = True, *, S: int = 1,
                n_blocks: int | None = None, decode: bool | None = None) -> Graph:
    """The graph of ``model`` (an opened GGUFFile) for steps of ``T`` rows of up to ``S`` sequences of up to
    ``n_ctx`` tokens each, over a KV pool of ``n_blocks`` blocks (default: S full contexts).

    Inputs (graph/ir.py) ``tokens``, ``positions``, ``row_seq`` i32[T], ``block_table`` i32[S, MB] and, for
    a "last" graph that is not a decode graph, ``out_rows`` i32[S]; output ``logits`` [S, vocab] (each
    sequence's last row) or [T, vocab] ("all"). ``decode`` (default: T == S with logits "last"): one row per
    sequence. ``fuse`` applies ``oxigpu.graph.fuse`` (every backend runs the fused graph; off for
    comparisons).
    """
    arch = model.arch
    fam = FAMILIES.get(arch)
    if fam is None:
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported; supported: {', '.join(FAMILIES)}")
    hp = hparams if hparams is not None else HParams.from_gguf(model)
    if decode is None:
        decode = T == S and logits == "last"
    g = decoder(fam, model, hp, T, n_ctx, logits, S=S, n_blocks=n_blocks, decode=decode)
    return fuse_graph(g) if fuse else g


__all__ = ["build_graph", "FAMILIES", "HParams"]
