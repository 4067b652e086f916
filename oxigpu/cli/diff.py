"""`oxigpu diff`: run one Plan on the numpy and the wgpu backend and find the first node that disagrees.

Both backends run the same compiled plan (T = the prompt's length, logits for every row, a cache of
exactly that many rows, so there is no padding to ignore) with their ``trace`` hooks; the wgpu backend
then submits node by node and reads every output back. A node diverges when ``max |wgpu - numpy| >
atol + rtol * max |numpy|`` over any of its outputs (for ``kv_store``: the caches it wrote). Each node is
fed its own backend's inputs, so error that builds up over many layers can also trip a late node.
A one-token prompt runs the decode GEMVs, which on a hardware adapter multiply int8 activations
(``Device.int8_dots``, ~1e-2 relative): set ``OXIGPU_INT8_DOTS=0`` to compare float dots.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click
import numpy as np

from ..backends.base import Step
from ..graph.ir import Node
from .common import friendly_errors, model_option, read_prompt, resolve_model, verbose_option
from .progress import stage


@dataclass
class NodeDiff:
    """The worst output of one node: where, what, and how far apart."""

    index: int
    name: str
    op: str
    shapes: list[tuple[int, ...]]
    max_abs: float
    max_ref: float

    @property
    def rel(self) -> float:
        return self.max_abs / self.max_ref if self.max_ref else (0.0 if self.max_abs == 0 else float("inf"))

    def describe(self) -> str:
        shapes = ", ".join("x".join(map(str, s)) for s in self.shapes)
        return (f"node {self.index} {self.name} ({self.op}, [{shapes}]): max |diff| {self.max_abs:.3g}, "
                f"max |numpy| {self.max_ref:.3g}, relative {self.rel:.3g}")


@dataclass
class DiffReport:
    n_nodes: int
    first_bad: NodeDiff | None
    worst: NodeDiff | None


def diff_backends(model_path: str, tokens: list[int], atol: float, rtol: float,
                  log: Callable[[str], None] | None = None) -> DiffReport:
    """Trace ``tokens`` through numpy and wgpu on one plan; compare node by node (see the module docstring).
    ``log`` hears about each stage (on a terminal a bar also counts the nodes)."""
    from ..backends.numpy_backend import NumpyBackend
    from ..backends.wgpu.backend import WgpuBackend
    from ..gguf import GGUFFile
    from ..graph.plan import compile as compile_plan
    from ..models import build_graph
    from .progress import Counter

    say = log or (lambda line: None)
    model = GGUFFile(model_path)
    n = len(tokens)
    say(f"[1/3] compiling the plan for {n} tokens")
    plan = compile_plan(build_graph(model, None, n, n, "all"))
    ids = np.asarray(tokens, np.int32)
    ref: list[tuple[np.ndarray, ...]] = []
    say(f"[2/3] numpy: running the {len(plan.nodes)} nodes")
    with Counter(len(plan.nodes), "numpy nodes", enabled=log is not None) as count:
        def keep(node: Node, outs: tuple[np.ndarray, ...]) -> None:
            ref.append(tuple(o.copy() for o in outs))
            count.update()
        NumpyBackend(model, n).run(plan, Step.single(ids, 0), trace=keep)
    report = DiffReport(len(plan.nodes), None, None)

    def compare(node: Node, outs: tuple[np.ndarray, ...]) -> None:
        i = len(compared)
        want = ref[i]
        err = max((float(np.abs(g - w).max()) if w.size else 0.0) for g, w in zip(outs, want))
        scale = max((float(np.abs(w).max()) if w.size else 0.0) for w in want)
        if not all(np.isfinite(g).all() for g in outs):
            err = float("inf")
        d = NodeDiff(i, node.name, node.op, [w.shape for w in want], err, scale)
        compared.append(d)
        if report.first_bad is None and err > atol + rtol * scale:
            report.first_bad = d
        if report.worst is None or d.rel > report.worst.rel:
            report.worst = d
        count.update()

    compared: list[NodeDiff] = []
    say(f"[3/3] wgpu: loading the weights, then each of the {len(plan.nodes)} nodes in its own submit, compared")
    with Counter(len(plan.nodes), "wgpu nodes", enabled=log is not None) as count:
        WgpuBackend(model, n).run(plan, Step.single(ids, 0), trace=compare)
    return report


@click.command("diff")
@model_option
@click.option("-p", "--prompt", required=True, help="Text to run through both backends ('-' reads stdin).")
@click.option("--atol", type=float, default=1e-5, show_default=True, help="Absolute tolerance per node.")
@click.option("--rtol", type=float, default=1e-3, show_default=True,
              help="Tolerance relative to the node's largest numpy output.")
@verbose_option
@friendly_errors
def diff(model: str | None, prompt: str, atol: float, rtol: float, verbose: bool) -> None:
    """Find the first graph node where the wgpu backend's outputs leave the numpy backend's."""
    from ..gguf import GGUFFile
    from ..tokenizer import Tokenizer

    path = resolve_model(model)
    with GGUFFile(path) as gguf:
        tokens = Tokenizer.from_metadata(gguf.metadata).encode(read_prompt(prompt))
    report = diff_backends(str(path), tokens, atol, rtol, log=stage)
    worst = report.worst.describe() if report.worst else "none"
    if report.first_bad is None:
        click.echo(f"all {report.n_nodes} nodes agree within atol {atol:g} + rtol {rtol:g} "
                   f"({len(tokens)} tokens); worst: {worst}")
        return
    click.echo(f"first divergence ({len(tokens)} tokens, atol {atol:g}, rtol {rtol:g}): "
               f"{report.first_bad.describe()}\nworst: {worst}")
    raise click.exceptions.Exit(1)
