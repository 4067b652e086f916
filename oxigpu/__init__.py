"""oxigpu: GPU-first LLM inference on WebGPU.

GGUF models are compiled into a static op graph whose nodes dispatch WGSL compute shaders through
wgpu-py; a numpy reference backend runs the same graph on the CPU and checks every shader.
"""
from __future__ import annotations

from ._version import __version__
from .errors import OxigpuError, GGUFError

__all__ = ["__version__", "OxigpuError", "GGUFError"]
