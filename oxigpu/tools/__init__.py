"""Tooling apart from the inference core: the benchmark drivers behind `oxigpu bench`, the numpy
(de)quantizer speed check and the kernel check harness behind `oxigpu kernels`."""
