"""A small OpenAI-compatible HTTP server on 127.0.0.1 for offline tests of the LLM layer.

Serves ``POST /v1/chat/completions`` and ``POST /v1/completions``. Each request takes the next
behaviour from a script (``server.script("429", "ok")``); with the script empty it answers "ok".
Behaviours:

- ``ok``: ``server.answer`` cut at the first of the request's ``stop`` strings, as a real server does
- ``ignore_stop``: ``server.answer`` whole, as a server that ignores ``stop``
- ``no_usage``: like ``ok`` without the ``usage`` object
- ``empty``: an empty completion
- ``429`` / ``500`` / ``401`` / ``404``: that status with an OpenAI-style error body
- ``malformed``: status 200, content type JSON, a body that is not JSON
- ``delay:<seconds>``: sleep, then answer ``ok`` (the client has usually given up by then)

Every request body is kept in ``server.requests`` (the temperatures a client sent, its stop strings).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAIServer:
    """Context manager: ``with FakeOpenAIServer() as srv: OpenAI(base_url=srv.base_url, ...)``."""

    def __init__(self, answer: str = " get_obj_names()\n>>> put_first_on_second('a', 'b')\n") -> None:
        self.answer = answer
        self.answers: deque[str] = deque()  # when not empty, each plain answer is taken from here in turn
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._script: deque[str] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *behaviours: str) -> None:
        """Queue behaviours for the next requests, in order."""
        with self._lock:
            self._script.extend(behaviours)

    def temperatures(self) -> list[float | None]:
        return [r.get("temperature") for r in self.requests]

    def next_behaviour(self, body: dict[str, Any], path: str) -> str:
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
            return self._script.popleft() if self._script else "ok"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _cut(text: str, stop: Any) -> tuple[str, str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(hits)], "stop") if hits else (text, "length")


def _body(kind: str, model: str, text: str, finish: str, usage: bool, prompt_chars: int) -> dict[str, Any]:
    if kind == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    body: dict[str, Any] = {"id": "cmpl-fake", "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}
    if usage:
        prompt_tokens = max(1, prompt_chars // 4)
        completion_tokens = len(text.split())
        total = prompt_tokens + completion_tokens
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}
    return body


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            pass

        def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and hung up

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            if path.endswith("/chat/completions"):
                kind = "chat"
                prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
            elif path.endswith("/completions"):
                kind = "completions"
                prompt_chars = len(body.get("prompt") or "")
            else:
                self._send(404, json.dumps({"error": {"message": f"no route {path}"}}).encode())
                return
            behaviour = server.next_behaviour(body, path)
            if behaviour.startswith("delay:"):
                time.sleep(float(behaviour.split(":", 1)[1]))
                behaviour = "ok"
            if behaviour in ("429", "500", "401", "404"):
                err = {"error": {"message": f"fake {behaviour}", "type": "fake", "code": behaviour}}
                self._send(int(behaviour), json.dumps(err).encode())
                return
            if behaviour == "malformed":
                self._send(200, b"{this is not json")
                return
            model = body.get("model", "fake-model")
            if behaviour == "empty":
                text, finish = "", "stop"
            elif behaviour == "ignore_stop":
                text, finish = server.answer, "length"
            else:
                with server._lock:
                    answer = server.answers.popleft() if server.answers else server.answer
                text, finish = _cut(answer, body.get("stop"))
            payload = _body(kind, model, text, finish, behaviour != "no_usage", prompt_chars)
            self._send(200, json.dumps(payload).encode())

    return Handler
