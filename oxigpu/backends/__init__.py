"""Backends execute a compiled ``graph.plan.Plan``.

Backends share the numpy backend's surface: ``Backend(model: GGUFFile, n_ctx)``, ``load(plan)``,
``run(plan, inputs, pos, n_tokens, trace=None) -> {output name: array}``, ``reset()`` and
``memory_bytes()``. ``numpy_backend.NumpyBackend`` is the CPU reference (its ops in ``numpy_ops`` define
each op's semantics); ``wgpu`` is the GPU backend. Import the one you need; this package imports neither,
so the numpy path never loads wgpu.
"""
from __future__ import annotations

import numpy as np

from ..errors import ContextLengthError, InvalidParameterError


def step_inputs(plan, inputs: dict[str, np.ndarray], pos: int, n_tokens: int,
                n_ctx: int) -> dict[str, np.ndarray]:
    """Check one step's arguments and return each plan input padded to its full shape (zeros past n_tokens).

    Every backend's ``run`` starts here, so both refuse the same bad steps with the same messages.
    """
    if not 1 <= n_tokens <= plan.T:
        raise InvalidParameterError(f"n_tokens must be in 1..{plan.T}, got {n_tokens}")
    if pos < 0 or pos + n_tokens > n_ctx:
        raise ContextLengthError(f"positions {pos}..{pos + n_tokens - 1} exceed the context of {n_ctx}")
    padded = {}
    for name, v in plan.inputs.items():
        if name not in inputs:
            raise InvalidParameterError(f"missing input {name!r}")
        src = np.asarray(inputs[name]).reshape(-1)
        if len(src) not in (n_tokens, v.shape[0]):
            raise InvalidParameterError(f"input {name!r} has {len(src)} rows; expected {n_tokens} or {v.shape[0]}")
        host = np.zeros(v.shape, np.int32 if v.dtype == "i32" else np.float32)
        host[:n_tokens] = src[:n_tokens]
        padded[name] = host
    return padded
