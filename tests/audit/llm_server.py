"""A real chat-completions endpoint on 127.0.0.1 with scripted answers, for judge tests.

The request's `model` picks the script: allow, deny, fenced, malformed, prose, extra-field,
slow (holds the answer until the test releases it), http500, gate (counts concurrent
requests and holds them until released), echo-policy (denies when the prompt carries a
given phrase). Runs in a thread (ThreadingHTTPServer), so it serves both anyio backends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_LIMIT_S = 10.0  # a held request never outlives the test by more than this

ANSWERS = {
    "allow": '{"decision": "allow", "violated_policy": null, "reason": "serves the task"}',
    "deny": '{"decision": "deny", "violated_policy": "2", "reason": "reads a private key"}',
    "fenced": '```json\n{"decision": "deny", "violated_policy": "3", "reason": "fenced"}\n```',
    "malformed": '{"decision": "maybe", "violated_policy": null, "reason": "unsure"}',
    "prose": 'I think this is fine. {"decision": "allow", "violated_policy": null, "reason": "x"}',
    "extra-field": '{"decision": "allow", "violated_policy": null, "reason": "x", "score": 1}',
}


class ScriptedLlm(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.release = threading.Event()
        self.two_inflight = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedLlm

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with srv.lock:
            srv.requests.append(body)
            srv.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
            srv.inflight += 1
            srv.max_inflight = max(srv.max_inflight, srv.inflight)
            if srv.inflight >= 2:
                srv.two_inflight.set()
        try:
            self._answer(srv, body)
        finally:
            with srv.lock:
                srv.inflight -= 1

    def _answer(self, srv: ScriptedLlm, body: dict[str, Any]) -> None:
        model = body["model"]
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": "not found"})
            return
        if model in ("slow", "gate"):
            srv.release.wait(HOLD_LIMIT_S)
            content = ANSWERS["allow"]
        elif model == "http500":
            self._send(500, {"error": {"message": "upstream exploded"}})
            return
        elif model == "echo-policy":
            prompt = body["messages"][-1]["content"]
            hit = "Never run rm" in prompt
            content = ANSWERS["deny" if hit else "allow"]
        else:
            content = ANSWERS[model]
        self._send(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ],
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)


@contextmanager
def serve_llm() -> Iterator[ScriptedLlm]:
    server = ScriptedLlm()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(HOLD_LIMIT_S)
