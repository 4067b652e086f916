"""Shared fixtures: synthetic tiny models, real model files (skipped with a reason when their packages are
absent) and the wgpu device."""
from __future__ import annotations

import gc
import os
import resource
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))   # the helper modules beside the tests (full_suite, ...)
from full_suite import FULL  # noqa: E402

os.environ.setdefault("LP_NUM_THREADS", "1")


class TinyModels(Mapping[str, str]):
    """Synthetic GGUF files by tiny shape name (tiny-llama, tiny-qwen2, ..., tiny-qwen3moe, tiny-bert:
    oxigpu.synth.SHAPES), each written the first time a test asks for it: a run that needs one architecture
    pays for one file."""

    def __init__(self, out: Path):
        from oxigpu.synth import SHAPES
        self._out, self._names = out, [name for name in SHAPES if name.startswith("tiny-")]
        self._paths: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        if name not in self._names:
            raise KeyError(f"{name!r} is not a tiny shape; have {self._names}")
        if name not in self._paths:
            from oxigpu.synth import synthesize
            self._paths[name] = str(synthesize(name, self._out / f"{name}.gguf", seed=7, workers=1).path)
        return self._paths[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


# The longest tests of CI's run (its --durations list), started first under pytest-xdist: workers take tests
# in collection order, so a long test collected late would leave one worker running it alone at the end.
LONG_FIRST = ("tests/test_batching.py::test_real_models", "tests/test_wgpu_parity.py", "tests/test_bench.py::test_wgpu",
              "tests/test_dawn_tint.py", "tests/test_structured.py", "tests/test_batching.py::test_wgpu",
              "tests/test_cli.py::test_real", "tests/test_architectures.py::test_wgpu")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):   # every worker sorts alike (xdist checks the orders agree)
        def rank(item) -> int:
            if item.nodeid.startswith(LONG_FIRST):
                return 0
            return 1 if item.get_closest_marker("slow") or item.get_closest_marker("realmodel") else 2
        items.sort(key=rank)
    if FULL:
        return
    skip = pytest.mark.skip(reason="part of the full sweep: set OXIGPU_FULL_TESTS=1")
    for item in items:
        if item.get_closest_marker("full"):
            item.add_marker(skip)


# -- memory: the peak RSS of the run and the tests that raised it (printed after --durations) --------------
_RSS_RISES: list[tuple[float, str]] = []


def _maxrss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _maxrss_bytes()
    try:
        return (yield)
    finally:
        grew = _maxrss_bytes() - before
        if grew > 0:
            _RSS_RISES.append((grew, item.nodeid))


def _rss_now() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:                     # no /proc (macOS): no collections between tests
        return 0


_RSS_AFTER_GC = [0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A model (LLM, Engine: reference cycles) lives until Python's cycle collector runs, which a test
    run of few large objects rarely triggers: dead real models piled up to 12 GiB in one worker. Collect
    after a test (its fixtures torn down) that left the process 256 MiB above the last collection."""
    try:
        return (yield)
    finally:
        if _rss_now() - _RSS_AFTER_GC[0] > 256 << 20:
            gc.collect()
            _RSS_AFTER_GC[0] = _rss_now()


def pytest_sessionfinish(session):
    """Under pytest-xdist, a worker hands its peak and its rises to the controller, which prints them."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["oxigpu_rss"] = {"peak": _maxrss_bytes(), "rises": _RSS_RISES}


_WORKER_RSS: dict[str, int] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    got = getattr(node, "workeroutput", {}).get("oxigpu_rss")
    if got:
        _WORKER_RSS[node.gateway.id] = got["peak"]
        _RSS_RISES.extend((grew, nodeid) for grew, nodeid in got["rises"])


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if _WORKER_RSS:   # the controller of an xdist run: each worker's peak (they run at the same time)
        peaks = ", ".join(f"{w} {b / 2**30:.2f}" for w, b in sorted(_WORKER_RSS.items()))
        tr.write_sep("=", f"peak memory: {peaks} GiB RSS (together at most {sum(_WORKER_RSS.values()) / 2**30:.2f})")
    else:
        tr.write_sep("=", f"peak memory: {_maxrss_bytes() / 2**30:.2f} GiB RSS")
    for grew, nodeid in sorted(_RSS_RISES, reverse=True)[:8]:
        tr.write_line(f"{grew / 2**30:6.2f} GiB  {nodeid}")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> TinyModels:
    """One synthetic GGUF file per supported architecture (random weights, real vocab machinery), by shape
    name, synthesized on first use."""
    return TinyModels(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def gemma3_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.gemma3_270m()
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def qwen_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.qwen25_coder_05b()
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture
def dev():
    """The wgpu device (lavapipe in CI); skips with the reason when no usable adapter exists.

    Function-scoped on purpose: ``Device.get()`` is cached, and after a device-loss test it hands out
    the replacement, so no later test inherits a lost device.
    """
    from oxigpu.backends.wgpu.device import Device
    from oxigpu.errors import DeviceError
    try:
        return Device.get()
    except DeviceError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def nomic_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.nomic_embed_v15()
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    locate = getattr(model_packages, "smollm2_135m", None)
    if locate is None:   # the locator arrives with the default-model work (model_packages.smollm2_135m)
        pytest.skip("model_packages.smollm2_135m is not in this tree")
    try:
        return locate()
    except ModelNotFoundError as e:
        pytest.skip(str(e))
