"""Soak test of `oxigpu serve`: many requests mixing valid, malformed and abandoned ones against one server.

Passes when the server stays up, every valid request gets exactly the text `LLM` gives for it (same model,
same settings), every malformed one gets a 4xx in OpenAI's error format, and once the traffic stops the
server is idle (no sequence running or waiting, no KV block held) with its RSS within --rss-slack-mb of
where it was after the warm-up.

    python dev/soak_server.py -m tiny.gguf --requests 10000 --workers 16      # the full soak
    python dev/soak_server.py --requests 1000                                  # a tiny synthetic model, here

Kinds of request (weights in KINDS): chat (also JSON-constrained with logprobs) and streamed/seeded
completions checked against LLM; bad JSON,
wrong types, invalid UTF-8, out-of-range values, random bytes and bodies over the size limit; streams closed
after their first chunk and blocking requests whose client hangs up. Only 127.0.0.1 is contacted; the run is
bounded by --requests and --max-seconds.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

from oxigpu import LLM

N_CTX = 256
MAX_BODY = 64 * 1024
PROMPTS = [f"Soak prompt number {i} goes like this:" for i in range(8)]
KINDS = {"chat": 3, "completion_stream": 3, "completion_seeded_n2": 2, "chat_json_logprobs": 1, "bad_json": 1,
         "wrong_type": 1, "invalid_utf8": 1, "out_of_range": 1, "random_bytes": 1, "huge_body": 1, "abandon_stream": 2,
         "abandon_blocking": 1}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


class Soak:
    def __init__(self, port: int, ref: LLM, seed: int):
        self.port = port
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []
        # what each valid request must answer, from LLM with the same settings
        chat = lambda p: [{"role": "user", "content": p}]
        self.expect_chat = {p: ref.chat(chat(p), temperature=0.0, max_tokens=8).text for p in PROMPTS}
        self.expect_greedy = {p: ref.generate(p, temperature=0.0, max_tokens=8).text for p in PROMPTS}
        self.expect_seeded = {p: [ref.generate(p, temperature=1.0, top_k=0, top_p=0.9, min_p=0.0, seed=s,
                                               max_tokens=8).text for s in (11, 12)] for p in PROMPTS}
        self.expect_json = {p: ref.chat(chat(p), temperature=0.0, max_tokens=8, json=True, logprobs=True)
                            for p in PROMPTS}
        self.eog = {str(t): -100 for t in ref.tokenizer.eog_ids}

    # -- plumbing ---------------------------------------------------------------------------------------
    def post(self, path: str, raw: bytes) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def fail(self, kind: str, what: str) -> None:
        with self.lock:
            self.failures.append(f"{kind}: {what}"[:300])

    def expect_error(self, kind: str, status: int, body: bytes, codes: tuple[int, ...] = (400,)) -> None:
        try:
            err = json.loads(body)["error"]
            ok = status in codes and isinstance(err["message"], str) and set(err) == {"message", "type", "param",
                                                                                     "code"}
        except Exception:
            ok = False
        if not ok:
            self.fail(kind, f"status {status}, body {body[:200]!r}")

    def valid(self, kind: str, path: str, body: dict) -> dict | str | None:
        """POST a valid request (retrying on 429); the parsed answer, or the streamed text."""
        for _ in range(100):
            status, _, raw = self.post(path, json.dumps(body).encode())
            if status != 429:
                break
            time.sleep(0.05)
        if status != 200:
            self.fail(kind, f"status {status}: {raw[:200]!r}")
            return None
        if not body.get("stream"):
            return json.loads(raw)
        text = []
        for block in raw.decode().split("\n\n"):
            if block and block != "data: [DONE]":
                chunk = json.loads(block.removeprefix("data: "))
                text += [c["text"] for c in chunk["choices"]]
        if not raw.decode().rstrip().endswith("data: [DONE]"):
            self.fail(kind, "stream did not end with [DONE]")
        return "".join(text)

    def abandon(self, body: dict, read_first: bool) -> None:
        data = json.dumps(body).encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
            s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            if read_first:
                s.recv(4096)
            else:
                time.sleep(self.rng.random() * 0.05)

    # -- one request --------------------------------------------------------------------------------------
    def one(self, kind: str, rng: random.Random) -> None:
        p = rng.choice(PROMPTS)
        if kind == "chat":
            r = self.valid(kind, "/v1/chat/completions", {"messages": [{"role": "user", "content": p}],
                                                         "max_tokens": 8, "temperature": 0})
            if isinstance(r, dict) and r["choices"][0]["message"]["content"] != self.expect_chat[p]:
                self.fail(kind, f"{p!r}: {r['choices'][0]['message']['content']!r} != {self.expect_chat[p]!r}")
        elif kind == "completion_stream":
            r = self.valid(kind, "/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 0,
                                                     "stream": True})
            if r is not None and r != self.expect_greedy[p]:
                self.fail(kind, f"{p!r}: {r!r} != {self.expect_greedy[p]!r}")
        elif kind == "completion_seeded_n2":
            r = self.valid(kind, "/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 1.0,
                                                     "top_p": 0.9, "seed": 11, "n": 2})
            if isinstance(r, dict) and [c["text"] for c in r["choices"]] != self.expect_seeded[p]:
                self.fail(kind, f"{p!r}: {[c['text'] for c in r['choices']]!r}")
        elif kind == "chat_json_logprobs":
            r = self.valid(kind, "/v1/chat/completions", {"messages": [{"role": "user", "content": p}],
                                                         "max_tokens": 8, "temperature": 0, "logprobs": True,
                                                         "response_format": {"type": "json_object"}})
            want = self.expect_json[p]
            if isinstance(r, dict) and (r["choices"][0]["message"]["content"] != want.text or [
                    t["token"] for t in r["choices"][0]["logprobs"]["content"]] != [t.token for t in want.logprobs]):
                self.fail(kind, f"{p!r}: {r['choices'][0]['message']['content']!r} != {want.text!r}")
        elif kind == "bad_json":
            raw = json.dumps({"prompt": p, "max_tokens": 4}).encode()
            self.expect_error(kind, *self.post("/v1/completions", raw[:rng.randrange(len(raw))])[::2])
        elif kind == "wrong_type":
            field, value = rng.choice([("max_tokens", "8"), ("temperature", "hot"), ("stream", 1), ("n", 1.5),
                                       ("stop", {"a": 1}), ("prompt", {"x": 1}), ("logit_bias", [1])])
            self.expect_error(kind, *self.post("/v1/completions",
                                               json.dumps({"prompt": p, field: value}).encode())[::2])
        elif kind == "invalid_utf8":
            raw = b'{"prompt": "' + bytes([0xC3, 0x28, 0xFF, 0xFE]) + b'", "max_tokens": 2}'
            self.expect_error(kind, *self.post("/v1/completions", raw)[::2])
        elif kind == "out_of_range":
            field, value = rng.choice([("temperature", 9), ("top_p", 0), ("n", 99), ("max_tokens", -1),
                                       ("presence_penalty", 5), ("logit_bias", {"1": 1e9})])
            self.expect_error(kind, *self.post("/v1/chat/completions", json.dumps(
                {"messages": [{"role": "user", "content": p}], field: value}).encode())[::2])
        elif kind == "random_bytes":
            self.expect_error(kind, *self.post("/v1/chat/completions", rng.randbytes(rng.randrange(1, 2000)))[::2])
        elif kind == "huge_body":
            raw = json.dumps({"prompt": "y" * (MAX_BODY + rng.randrange(1, 200_000))}).encode()
            try:
                self.expect_error(kind, *self.post("/v1/completions", raw)[::2], codes=(413,))
            except (ConnectionError, BrokenPipeError):
                pass     # the server may answer 413 and close before the client has sent everything
        elif kind == "abandon_stream":
            self.abandon({"messages": [{"role": "user", "content": p}], "max_tokens": 200, "stream": True,
                          "logit_bias": self.eog}, read_first=True)
        elif kind == "abandon_blocking":
            self.abandon({"messages": [{"role": "user", "content": p}], "max_tokens": 200,
                          "logit_bias": self.eog}, read_first=False)
        with self.lock:
            self.counts[kind] += 1

    def run(self, n: int, workers: int, deadline: float) -> None:
        kinds = [k for k, w in KINDS.items() for _ in range(w)]
        plan = [self.rng.choice(kinds) for _ in range(n)]
        next_i = iter(range(n))
        lock = threading.Lock()

        def worker(w: int) -> None:
            rng = random.Random(w)
            while time.monotonic() < deadline:
                with lock:
                    i = next(next_i, None)
                if i is None:
                    return
                try:
                    self.one(plan[i], rng)
                except Exception as e:       # a transport error on a valid request is a failure too
                    self.fail(plan[i], f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def gauges(port: int) -> dict[str, float]:
    text = get(port, "/metrics")[1].decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(oxigpu_\w+) (\S+)$", text, re.MULTILINE)}


def wait_idle(port: int, seconds: float = 60) -> dict[str, float]:
    deadline = time.monotonic() + seconds
    while True:
        g = gauges(port)
        if g["oxigpu_running_sequences"] == 0 and g["oxigpu_queue_depth"] == 0:
            return g
        if time.monotonic() > deadline:
            return g
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="GGUF file (default: a tiny synthetic qwen2 made here)")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("--rss-slack-mb", type=float, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model = args.model
    if model is None:
        from oxigpu.synth import synthesize
        model = str(synthesize("tiny-qwen2", os.path.join(tempfile.mkdtemp(), "tiny-qwen2.gguf"), seed=7).path)
    ref = LLM(model, backend=args.backend, n_ctx=N_CTX)
    proc = subprocess.Popen([sys.executable, "-m", "oxigpu", "serve", "-m", model, "--port", "0", "--backend",
                             args.backend, "--n-ctx", str(N_CTX), "--max-seqs", "8", "--max-queue", "64",
                             "--max-body", str(MAX_BODY), "--timeout", "120"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            sys.exit(f"the server did not start: {line!r}")
        port = int(m.group(1))
        soak = Soak(port, ref, args.seed)
        deadline = time.monotonic() + args.max_seconds
        t0 = time.monotonic()
        warm = max(50, args.requests // 20)
        soak.run(warm, args.workers, deadline)
        idle0 = wait_idle(port)
        rss0 = rss_mb(proc.pid)
        soak.run(args.requests - warm, args.workers, deadline)
        alive = proc.poll() is None and get(port, "/health") == (200, b'{"status":"ok"}')
        idle1 = wait_idle(port)
        rss1 = rss_mb(proc.pid)
        done = sum(soak.counts.values())
        print(f"{done} requests in {time.monotonic() - t0:.0f} s ({args.workers} workers): "
              f"{dict(sorted(soak.counts.items()))}")
        print(f"server alive and healthy: {alive}")
        print(f"idle after warm-up: running {idle0['oxigpu_running_sequences']:g}, queue "
              f"{idle0['oxigpu_queue_depth']:g}, KV blocks {idle0['oxigpu_kv_blocks_used']:g}; RSS {rss0:.0f} MB")
        print(f"idle at the end:    running {idle1['oxigpu_running_sequences']:g}, queue "
              f"{idle1['oxigpu_queue_depth']:g}, KV blocks {idle1['oxigpu_kv_blocks_used']:g}; RSS {rss1:.0f} MB "
              f"({rss1 - rss0:+.0f} MB)")
        print(f"failures: {len(soak.failures)}")
        for f in soak.failures[:20]:
            print("  ", f)
        ok = (alive and not soak.failures and done == args.requests and idle1["oxigpu_running_sequences"] == 0
              and idle1["oxigpu_queue_depth"] == 0 and idle1["oxigpu_kv_blocks_used"] == 0
              and rss1 - rss0 <= args.rss_slack_mb)
        print("PASS" if ok else "FAIL")
        sys.exit(0 if ok else 1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
