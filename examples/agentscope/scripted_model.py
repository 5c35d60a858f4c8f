"""A scripted OpenAI-compatible chat-completions server on loopback, standing in for the LLM.

`POST /v1/chat/completions` answers turn N of a script, N being the number of assistant
messages already in the request (so a retried request gets the same answer): a turn is either
`{"tool_calls": [{"name": ..., "arguments": {...}}]}` or `{"content": "..."}`; in content,
`{tool_results}` becomes the tool messages the agent sent since the user's last message, so
the final answer shows what the agent saw. Every request body is kept (`requests`) for tests.
Standard library only: the example's venv and the test suite's both import it.

    python scripted_model.py script.json     # prints "serving http://127.0.0.1:PORT/v1"
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Turn = dict[str, Any]


class ScriptedModel(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[Turn], host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.script = script
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(self.script):
            return _completion(body, {"role": "assistant", "content": "(script exhausted)"})
        step = self.script[turn]
        if "tool_calls" in step:
            calls = [
                {"id": f"call_{turn}_{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                for i, c in enumerate(step["tool_calls"])
            ]
            return _completion(body, {"role": "assistant", "content": None, "tool_calls": calls},
                               finish="tool_calls")
        content = str(step["content"]).replace("{tool_results}", "\n".join(tool_results(body)))
        return _completion(body, {"role": "assistant", "content": content})


def tool_results(body: dict[str, Any]) -> list[str]:
    """The text of the tool messages in a request, after its last user message."""
    messages = body.get("messages", [])
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [_text(m.get("content")) for m in messages[last_user + 1:] if m.get("role") == "tool"]


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def _completion(body: dict[str, Any], message: dict[str, Any], finish: str = "stop") -> Any:
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedModel

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        if body.get("stream"):
            self._send(400, {"error": {"message": "the scripted model does not stream"}})
            return
        with self.server.lock:
            self.server.requests.append(body)
            reply = self.server.answer(body)
        self._send(200, reply)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve_model(script: list[Turn]) -> Iterator[ScriptedModel]:
    """Serve `script` on 127.0.0.1 (a free port) in a thread for the block's duration."""
    server = ScriptedModel(script)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripted_model.py SCRIPT.json")
    with open(sys.argv[1]) as f:
        model = ScriptedModel(json.load(f))
    print(f"serving {model.base_url}", flush=True)
    try:
        model.serve_forever()
    except KeyboardInterrupt:
        pass
