"""Test helper: a local HTTP server speaking the part of the Hugging Face Hub's API that file downloads use
(repository file listing, HEAD/GET on /{repo}/resolve/{revision}/{path} with ETag, commit and Range
headers, the Hub's X-Error-Code on 404s, tokens for private repositories, gated repositories), so the
Hub client can be tested with HF_ENDPOINT pointing here and no network."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


@dataclass
class Repo:
    files: dict[str, bytes]
    token: str | None = None          # private: this bearer token is required
    gated: bool = False
    commit: str = field(default_factory=lambda: hashlib.sha1(b"oxigpu").hexdigest())


class FakeHub:
    """``with FakeHub({"org/name": Repo({...})}) as hub: hub.url`` -- requests are logged in ``hub.log``."""

    def __init__(self, repos: dict[str, Repo]):
        self.repos = repos
        self.log: list[tuple[str, str, str | None]] = []      # (method, path, Range header)
        self.cut_first_get_at: int | None = None             # drop the connection after this many bytes, once
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, body=False)

            def do_GET(self) -> None:
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def gets(self, name: str) -> list[str | None]:
        """The Range headers of the GETs of file ``name`` (None: the whole file)."""
        return [r for m, p, r in self.log if m == "GET" and p.endswith("/" + name)]

    # -- the API --------------------------------------------------------------------------------------
    def _serve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.log.append((h.command, path, h.headers.get("Range")))
        tree = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
        resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        name = (tree or resolve)[1] if (tree or resolve) else None
        repo = self.repos.get(name) if name else None
        if repo is None:
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        if repo.gated:
            return self._error(h, 403, "GatedRepo", "Access to this repository is restricted")
        if repo.token is not None and h.headers.get("Authorization") != f"Bearer {repo.token}":
            return self._error(h, 401, "RepoNotFound", "Invalid credentials")
        if tree:
            listing = [{"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                       for p, b in sorted(repo.files.items())]
            return self._send(h, 200, json.dumps(listing).encode(), {"Content-Type": "application/json"}, body)
        data = repo.files.get(resolve[3])
        if data is None:
            return self._error(h, 404, "EntryNotFound", "Entry not found")
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        rng = h.headers.get("Range")
        if rng and body:
            start = int(re.match(r"bytes=(\d+)-", rng)[1])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return self._send(h, 206, data[start:], headers, body)
        if body and self.cut_first_get_at is not None:
            cut, self.cut_first_get_at = self.cut_first_get_at, None
            h.send_response(200)
            for k, v in {**headers, "Content-Length": str(len(data))}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        self._send(h, 200, data, headers, body)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(data))}.items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        self._send(h, status, json.dumps({"error": message}).encode(),
                   {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
                   h.command != "HEAD")
