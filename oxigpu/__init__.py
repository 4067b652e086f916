"""oxigpu: GPU-first LLM inference on WebGPU.

GGUF models are compiled into a static op graph whose nodes dispatch WGSL compute shaders through
wgpu-py; a numpy reference backend runs the same graph on the CPU and checks every shader.

    import oxigpu
    llm = oxigpu.load()            # or oxigpu.LLM("model.gguf", backend="numpy")
    print(llm.generate("Hello", max_tokens=16).text)

`LLM`, `load`, `AsyncLLM` (the async API a server drives), `SamplingParams` and `GenerationResult` are
imported on first use, so `import oxigpu`
stays fast (no numpy, tokenizers or wgpu until a model is loaded).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import GGUFError, OxigpuError

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports these on first use
    from .aio import AsyncLLM  # noqa: F401
    from .api import LLM, load  # noqa: F401
    from .runtime.params import GenerationResult, SamplingParams, Timings  # noqa: F401

_LAZY = {"LLM": "api", "load": "api", "AsyncLLM": "aio", "SamplingParams": "runtime.params",
         "GenerationResult": "runtime.params", "Timings": "runtime.params"}

__all__ = ["__version__", "OxigpuError", "GGUFError", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'oxigpu' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
