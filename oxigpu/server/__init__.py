"""An OpenAI-compatible HTTP server for one model (FastAPI + uvicorn), as ``oxigpu serve`` runs it.

    oxigpu serve -m model.gguf --port 8080          # then point any OpenAI client at http://127.0.0.1:8080/v1

From Python (tests, examples, a program embedding the server):

    with BackgroundServer(lambda: AsyncLLM("model.gguf")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused")

Needs the ``server`` extra (``pip install 'oxigpu[server]'``).
"""
from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..aio import AsyncLLM
from ..errors import OxigpuError
from .app import ApiError, ServerConfig, ServerState, create_app

__all__ = ["ApiError", "BackgroundServer", "ServerConfig", "ServerState", "bind", "create_app", "url_of",
           "uvicorn_server"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one), so a taken port fails before the model loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OxigpuError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    return f"http://{shown}:{port}"


def uvicorn_server(app: Any, verbose: bool = False, max_connections: int = 1024) -> Any:
    """The uvicorn server for `app`: its own log lines only with `verbose`, connections bounded."""
    import uvicorn
    config = uvicorn.Config(app, log_level="info" if verbose else "warning", access_log=verbose,
                            limit_concurrency=max_connections, timeout_graceful_shutdown=5, lifespan="on")
    return uvicorn.Server(config)


class BackgroundServer:
    """uvicorn serving the model `loader` returns, in a thread, on host:port (port 0: a free one).

    ``start()`` (or ``with``) returns once the model is loaded (OxigpuError if loading failed); ``url`` and
    ``base_url`` (``url + "/v1"``) say where it listens; ``stop()`` shuts it down and closes the model.
    """

    def __init__(self, loader: Callable[[], AsyncLLM], config: ServerConfig | None = None,
                 host: str = "127.0.0.1", port: int = 0):
        self.app = create_app(loader, config)
        self.state: ServerState = self.app.state.server
        self._sock = bind(host, port)
        self.url = url_of(self._sock)
        self.base_url = self.url + "/v1"
        self._server = uvicorn_server(self.app)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="oxigpu-server", daemon=True)

    def start(self, timeout: float = 600.0, wait_loaded: bool = True) -> BackgroundServer:
        """Serve; return once the model is loaded (or, with wait_loaded=False, once the port answers)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started or (wait_loaded and self.state.status == "loading"):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OxigpuError(f"the server did not start within {timeout:g} s")
            time.sleep(0.02)
        if wait_loaded and self.state.status == "error":
            self.stop()
            raise OxigpuError(f"the model failed to load: {self.state.error}")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(30)
        self._sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
