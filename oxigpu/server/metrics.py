"""Prometheus metrics of one server (its own registry, so several servers in one process stay apart)."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: F401  (re-exported for the app)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..aio import Stats

# Latency buckets from a fast GPU decode step (~1 ms) to a slow CPU prefill (tens of seconds).
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """Counters and histograms the routes feed, gauges read from the engine's stats at scrape time."""

    def __init__(self, stats: Callable[[], Stats | None]):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("oxigpu_requests", "HTTP requests by route and status code",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("oxigpu_prompt_tokens", "Prompt tokens of accepted requests", registry=r)
        self.generated_tokens = Counter("oxigpu_generated_tokens", "Tokens generated (streamed or not, "
                                        "cancelled requests included)", registry=r)
        self.ttft = Histogram("oxigpu_time_to_first_token_seconds", "From request to its first token",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.itl = Histogram("oxigpu_inter_token_latency_seconds", "Between consecutive tokens of a request",
                             buckets=_ITL_BUCKETS, registry=r)
        self._stats = stats
        for name, doc, field in (("oxigpu_queue_depth", "Requests waiting for a sequence slot", "queue_depth"),
                                 ("oxigpu_running_sequences", "Sequences generating now", "running"),
                                 ("oxigpu_kv_blocks_used", "KV-cache blocks held by running sequences",
                                  "kv_blocks_used"),
                                 ("oxigpu_kv_blocks_total", "KV-cache blocks in the pool", "kv_blocks_total")):
            Gauge(name, doc, registry=r).set_function(self._reader(field))

    def _reader(self, field: str) -> Callable[[], float]:
        def read() -> float:
            s = self._stats()
            return float(getattr(s, field)) if s is not None else 0.0
        return read

    def render(self) -> bytes:
        return generate_latest(self.registry)
