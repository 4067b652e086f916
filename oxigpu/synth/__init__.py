"""Synthetic GGUF files: random weights in real and tiny model shapes, written from a seed.

    from oxigpu.synth import synthesize, SHAPES
    synthesize("llama-3.1-8b", "llama8b.gguf", ftype="Q4_K_M", seed=0)

Tests and benchmarks use these instead of downloads; `oxigpu synth` is the command-line front end.
"""
from __future__ import annotations

from .mix import FTYPES, Mix, use_more_bits
from .shapes import SHAPES, Shape, get_shape
from .writer import SynthResult, TensorPlan, plan_tensors, synthesize

__all__ = ["FTYPES", "Mix", "use_more_bits", "SHAPES", "Shape", "get_shape", "SynthResult", "TensorPlan",
           "plan_tensors", "synthesize"]
