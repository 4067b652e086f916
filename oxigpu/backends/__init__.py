"""Backends execute a compiled ``graph.plan.Plan``.

Backends share the numpy backend's surface: ``Backend(model: GGUFFile, n_ctx)``, ``load(plan)``,
``run(plan, inputs, pos, n_tokens, trace=None) -> {output name: array}``, ``reset()`` and
``memory_bytes()``. ``numpy_backend.NumpyBackend`` is the CPU reference (its ops in ``numpy_ops`` define
each op's semantics); ``wgpu`` is the GPU backend. Import the one you need; this package imports neither,
so the numpy path never loads wgpu.
"""
