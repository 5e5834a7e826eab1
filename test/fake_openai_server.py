"""A small OpenAI-compatible HTTP server on 127.0.0.1 for offline tests of the LLM layer.

Serves ``POST /v1/chat/completions`` and ``POST /v1/completions``. Each request takes the next
behaviour from a script (``server.script("429", "ok")``); with the script empty it takes
``server.default`` ("ok" unless set: ``server.default = "503"`` is an endpoint that stays down).
Behaviours:

- ``ok``: the answer cut at the first of the request's ``stop`` strings, as a real server does
- ``ignore_stop``: the answer whole, as a server that ignores ``stop``
- ``no_usage``: like ``ok`` without the ``usage`` object
- ``empty``: an empty completion
- ``429`` / ``500`` / ``401`` / ``404``, or any other status but 400 (``502``, ``503``, ``403``, ...): that
  status with an OpenAI-style error body; ``503;retry-after=2`` also sends the header ``Retry-After: 2``
- ``400``: HTTP 400 naming no parameter (a context-length error)
- ``400_stop`` / ``400_temperature`` / ``400_max_tokens``: HTTP 400 in OpenAI's words when the request
  carries ``stop`` / a temperature other than 1 / ``max_tokens``, else ``ok``
- ``malformed``: status 200, content type JSON, a body that is not JSON (a streamed request too)
- ``malformed_stream``: a streamed request gets an event stream whose events are not JSON
- ``delay:<seconds>``: sleep, then answer ``ok`` (the client has usually given up by then)
- ``stream_cut``: a streamed request gets half its chunks, then the connection drops without ``[DONE]``;
  ``stream_cut:<n>`` gets its first n chunks (the first of a chat stream is the empty role chunk)

The answer is ``server.respond(body)`` when that hook is set, else the next of ``server.answers``,
else ``server.answer``. ``server.refuse`` (e.g. ``{"stop", "temperature"}``) 400s every request that
carries one of those parameters, as a reasoning model does. ``server.cached_prefix = True`` reports
``usage.prompt_tokens_details.cached_tokens``: the common prefix (chars / 4) with the previous request.

Usage counts a token per ~4 characters (``pieces``), streamed or not. Streaming (``"stream": true``):
Server-Sent Events in OpenAI's chunk format, one chunk per piece, after ``first_token_delay`` seconds
and ``token_delay`` seconds apart (a non-streamed answer waits as long in total), ``server.reasoning`` first as ``reasoning_content``
deltas, a usage chunk at the end when ``stream_options.include_usage``. ``server.chunks_sent`` counts
the chunks actually written: a client that closes the stream early shows as a broken pipe that stops it.

Tool calls (native tool calling): an answer (from ``respond``, ``answers`` or ``answer``) may be a dict
``{"content": "..." or None, "tool_calls": [{"id": "...", "name": "...", "arguments": {...} or "..."}]}``,
the form ``ScriptedModel.chat_tools`` scripts. A chat request then gets OpenAI's format:
``choices[0].message.tool_calls = [{"id", "type": "function", "function": {"name", "arguments"}}]``
(arguments as a JSON string, a missing id as ``call_<request>_<n>``), ``content`` null when the dict
has none, ``finish_reason`` "tool_calls" (``stop`` when the list is empty). Such answers are not
streamed: a streamed request for one gets HTTP 400. A ``respond`` hook that looks at the request's
``tool`` messages scripts a whole conversation.

Every request body is kept in ``server.requests`` (the temperatures a client sent, its stop strings,
the ``tools`` and ``tool`` messages of a chat with tools). ``server.in_flight`` counts the requests being
answered now (a ``delay`` one still sleeping after its client gave up, a stream still being written).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

UNSUPPORTED = "Unsupported parameter: '{name}' is not supported with this model."
MESSAGES = {
    "stop": UNSUPPORTED.format(name="stop"),
    "temperature": "Unsupported value: 'temperature' does not support {value} with this model. Only the default (1) value is supported.",
    "max_tokens": UNSUPPORTED.format(name="max_tokens") + " Use 'max_completion_tokens' instead.",
}
CONTEXT_ERROR = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens."
REFUSE_ORDER = ("max_tokens", "stop", "temperature", "reasoning_effort", "stream_options", "stream")


def pieces(text: str) -> list[str]:
    """The stream chunks of ``text``: about four characters each, whitespace kept with the next word."""
    return re.findall(r"\s*\S{1,4}|\s+", text)


class FakeOpenAIServer:
    """Context manager: ``with FakeOpenAIServer() as srv: OpenAI(base_url=srv.base_url, ...)``."""

    def __init__(self, answer: str = " get_obj_names()\n>>> put_first_on_second('a', 'b')\n") -> None:
        self.answer = answer
        self.answers: deque[str | dict[str, Any]] = deque()  # when not empty, each plain answer is taken from here in turn
        self.respond: Callable[[dict[str, Any]], str | dict[str, Any]] | None = None  # body -> answer, before answers/answer
        self.reasoning = ""  # streamed (and reported) as reasoning before the answer, chat mode
        self.refuse: set[str] = set()  # parameters every request is refused for (HTTP 400)
        self.cached_prefix = False
        self.served_model = ""  # the model name answered; '' = the requested one
        self.first_token_delay = 0.0
        self.token_delay = 0.0
        self.chunks_sent = 0
        self.in_flight = 0
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.default = "ok"  # the behaviour while the script is empty
        self._previous_prompt = ""
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
            return self._script.popleft() if self._script else self.default

    def next_answer(self, body: dict[str, Any]) -> str | dict[str, Any]:
        if self.respond is not None:
            return self.respond(body)
        with self._lock:
            return self.answers.popleft() if self.answers else self.answer

    def cached_tokens(self, prompt: str) -> int:
        """Tokens (chars / 4) of the common prefix with the previous request's prompt; remembers this one."""
        with self._lock:
            previous, self._previous_prompt = self._previous_prompt, prompt
        common = next((i for i, (a, b) in enumerate(zip(previous, prompt)) if a != b), min(len(previous), len(prompt)))
        return common // 4

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Count one request in ``in_flight`` meanwhile."""
        with self._lock:
            self.in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def count_chunk(self) -> None:
        with self._lock:
            self.chunks_sent += 1

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


def _cut_after(behaviour: str) -> int | None:
    """The chunks a ``stream_cut`` behaviour lets through (0: half of them); None for any other behaviour."""
    if behaviour == "stream_cut":
        return 0
    if behaviour.startswith("stream_cut:"):
        return max(1, int(behaviour.split(":", 1)[1]))
    return None


def _prompt_text(kind: str, body: dict[str, Any]) -> str:
    if kind == "chat":
        return "".join(f"<{m.get('role')}>{m.get('content') or ''}" for m in body.get("messages", []))
    return str(body.get("prompt") or "")


def _carries(body: dict[str, Any], name: str) -> bool:
    """Whether a request carries ``name`` in a way a reasoning model refuses (temperature 1 is its default)."""
    if name == "temperature":
        return body.get("temperature") not in (None, 1, 1.0)
    if name == "stream":
        return bool(body.get("stream"))
    return name in body


def _refusal(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's error body for a refused parameter."""
    message = MESSAGES.get(name, UNSUPPORTED.format(name=name)).format(value=body.get("temperature"))
    code = "unsupported_value" if name == "temperature" else "unsupported_parameter"
    return {"error": {"message": message, "type": "invalid_request_error", "param": name, "code": code}}


def _usage(prompt_chars: int, completion_tokens: int, cached: int | None, reasoning: int) -> dict[str, Any]:
    prompt_tokens = max(1, prompt_chars // 4)
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": min(cached, prompt_tokens)}
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _tool_calls(calls: list[dict[str, Any]], request: int) -> list[dict[str, Any]]:
    """A tool-call answer's calls in OpenAI's format: arguments as a JSON string."""
    out = []
    for n, call in enumerate(calls, start=1):
        arguments = call.get("arguments", {})
        out.append({"id": call.get("id") or f"call_{request}_{n}", "type": "function",
                    "function": {"name": call["name"], "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
    return out


def _body(kind: str, model: str, text: str | None, finish: str, usage: dict[str, Any] | None, reasoning: str = "",
          tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    body: dict[str, Any] = {"id": "cmpl-fake", "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}
    if usage is not None:
        body["usage"] = usage
    return body


def _chunk(kind: str, model: str, *, content: str | None = None, reasoning: str | None = None,
           finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed chunk in OpenAI's format (no choice at all when it carries the usage)."""
    if kind == "chat":
        delta: dict[str, Any] = {}
        if content is not None:
            delta["content"] = content
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        obj = "chat.completion.chunk"
    else:
        choices = [{"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}]
        obj = "text_completion"
    chunk: dict[str, Any] = {"id": "cmpl-fake", "object": obj, "created": int(time.time()), "model": model,
                             "choices": [] if usage is not None else choices}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
            pass

        def handle(self) -> None:
            # a client that hung up (timed out, closed its stream) while we waited for its next request
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                super().handle()

        def _send(self, status: int, payload: bytes, content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and hung up

        def _error(self, status: int, error: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(error).encode(), headers=headers)

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            with server.answering():
                self._answer()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            if path.endswith("/chat/completions"):
                kind = "chat"
            elif path.endswith("/completions"):
                kind = "completions"
            else:
                self._error(404, {"error": {"message": f"no route {path}"}})
                return
            prompt = _prompt_text(kind, body)
            prompt_chars = len(prompt) if kind == "completions" else sum(len(m.get("content") or "") for m in body.get("messages", []))
            behaviour = server.next_behaviour(body, path)
            if behaviour.startswith("delay:"):
                time.sleep(float(behaviour.split(":", 1)[1]))
                behaviour = "ok"
            status, _, retry_after = behaviour.partition(";retry-after=")
            if len(status) == 3 and status.isdigit() and status != "400":
                headers = {"Retry-After": retry_after} if retry_after else None
                self._error(int(status), {"error": {"message": f"fake {status}", "type": "fake", "code": status}}, headers)
                return
            if behaviour == "400":
                self._error(400, {"error": {"message": CONTEXT_ERROR, "type": "invalid_request_error", "param": "messages",
                                            "code": "context_length_exceeded"}})
                return
            refused = server.refuse | ({behaviour[4:]} if behaviour.startswith("400_") else set())
            name = next((n for n in (*REFUSE_ORDER, *sorted(refused)) if n in refused and _carries(body, n)), None)
            if name is not None:
                self._error(400, _refusal(name, body))
                return
            if behaviour == "malformed":
                self._send(200, b"{this is not json")
                return
            model = server.served_model or body.get("model", "fake-model")
            reasoning = server.reasoning if kind == "chat" else ""
            answer = "" if behaviour == "empty" else server.next_answer(body)
            calls: list[dict[str, Any]] = []
            if isinstance(answer, dict):  # a tool-call answer
                if body.get("stream"):
                    self._error(400, {"error": {"message": "the fake server streams no tool calls", "type": "fake"}})
                    return
                calls = _tool_calls(list(answer.get("tool_calls") or []), len(server.requests))
                text, finish = answer.get("content"), "tool_calls" if calls else "stop"
            elif behaviour == "empty":
                text, finish = "", "stop"
            elif behaviour == "ignore_stop":
                text, finish = answer, "length"
            else:
                text, finish = _cut(answer, body.get("stop"))
            cached = server.cached_tokens(prompt) if server.cached_prefix else None
            if body.get("stream"):
                self._stream(kind, model, text, finish, reasoning, body, prompt_chars, cached, cut=_cut_after(behaviour),
                             garbage=behaviour == "malformed_stream")
                return
            written = (text or "") + (json.dumps(calls) if calls else "")
            time.sleep(server.first_token_delay + server.token_delay * len(pieces(reasoning + written)))
            usage = None
            if behaviour != "no_usage":
                completion_tokens = len(pieces(written)) + len(pieces(reasoning))
                usage = _usage(prompt_chars, completion_tokens, cached, len(pieces(reasoning)))
            self._send(200, json.dumps(_body(kind, model, text, finish, usage, reasoning, calls)).encode())

        def _stream(self, kind: str, model: str, text: str, finish: str, reasoning: str, body: dict[str, Any],
                    prompt_chars: int, cached: int | None, *, cut: int | None, garbage: bool = False) -> None:
            """Send the reply as SSE chunks; ``cut``: only that many (0: half), then drop the connection."""
            thoughts, words = pieces(reasoning), pieces(text)
            events = [_chunk(kind, model, content="")] if kind == "chat" else []
            events += [_chunk(kind, model, reasoning=p) for p in thoughts] + [_chunk(kind, model, content=p) for p in words]
            events.append(_chunk(kind, model, content="" if kind == "completions" else None, finish=finish))
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append(_chunk(kind, model, usage=_usage(prompt_chars, len(thoughts) + len(words), cached, len(thoughts))))
            if cut is not None:
                events = events[: cut or max(1, len(events) // 2)]
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                time.sleep(server.first_token_delay)
                for i, event in enumerate(events):
                    if i and server.token_delay:
                        time.sleep(server.token_delay)
                    data = "{this is not json" if garbage else json.dumps(event)
                    self._write_chunk(f"data: {data}\n\n".encode())
                    server.count_chunk()
                if cut is not None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # no [DONE], no final empty chunk
                    return
                self._write_chunk(b"data: [DONE]\n\n")
                self._write_chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client closed the stream: stop generating, as a server does

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler
