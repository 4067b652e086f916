"""Backends execute a compiled ``graph.plan.Plan``.

``base.Backend`` is what every backend offers and ``base.Step`` what one step hands it.
``numpy_backend.NumpyBackend`` is the CPU reference (its ops in ``numpy_ops`` define each op's semantics);
``wgpu`` is the GPU backend. Import the one you need; this package imports neither, so the numpy path never
loads wgpu.
"""
