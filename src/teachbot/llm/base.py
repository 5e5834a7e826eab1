"""The LLM interface every backend implements: ``Model.generate(prompt, stop) -> Completion``.

Pure Python (no ROS): the interaction manager, the function generator and the improvement step all
talk to a ``Model``; nodes publish each ``Completion`` (prompt digest + text) so a recorded session
can be replayed by ``ScriptedModel`` without any LLM. Every completion of a backend is also an ``llm.call``
span of the current trace (teachbot.tracing): role, model, prompt digest, tokens, cost, latency, finish reason and
the reply (cut to tracing's max_attribute_chars).
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from teachbot.errors import ConfigError, TeachbotError
from teachbot.llm.pricing import PriceTable
from teachbot.tracing import record_span

DEFAULT_STOP: tuple[str, ...] = (">>>",)
"""The console prompt: the LLM writes one statement, then the console takes over again."""

SYSTEM_END = "\n#### end of system message ####\n"
"""Marks where a prompt's static instructions end. Chat backends send the text before it as the system
message and the text after it as the user message; completion backends send both parts joined by a
blank line. The prompt digest is taken over the prompt as given, marker included."""


def split_system(prompt: str) -> tuple[str, str]:
    """``(system, user)`` of a prompt; ``system`` is '' when the prompt has no ``SYSTEM_END``."""
    if SYSTEM_END not in prompt:
        return "", prompt
    system, user = prompt.split(SYSTEM_END, 1)
    return system, user


def plain_prompt(prompt: str) -> str:
    """The prompt as one text for completion backends: system and user part joined by a blank line."""
    system, user = split_system(prompt)
    return f"{system}\n\n{user}" if system else user


# why an LLM call failed (LLMError.kind): what the robot tells the person depends on it
UNREACHABLE = "unreachable"  # no answer: connection refused, timeouts, 5xx/429 after every retry
REFUSED = "refused"  # the endpoint answered and said no: HTTP 400, 401, 403, 404 (a setting or the key is wrong)
MALFORMED = "malformed"  # it answered something that is not the OpenAI API: garbage JSON, no choices
SETUP = "setup"  # the backend is not set up: no API key, a bad config value, no model folder, a replay file


class LLMError(TeachbotError):
    """An LLM backend failed in a way its caller cannot fix by retrying; the message says what to check.

    ``kind`` says which way (UNREACHABLE, REFUSED, MALFORMED, SETUP), so the robot tells the person the
    right thing: an endpoint that refuses a request is reachable, and waiting for it will not help.
    ``status``: the HTTP status of a refusal (400: this request was refused, 401/403: the key), else 0.
    """

    def __init__(self, message: str, *, attempts: int = 0, kind: str = SETUP, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.kind = kind


@dataclass(frozen=True)
class Completion:
    """One answer of a model to one prompt, with what it cost."""

    text: str
    model: str
    prompt_digest: str  # sha256 hex of the exact prompt text (prompt_digest())
    prompt_tokens: int
    completion_tokens: int
    latency: float  # seconds, wall, including retries
    finish_reason: str = ""  # stop, length, early (a streamed reply closed once ``until`` held), ...
    attempts: int = 1
    cached_tokens: int = 0  # prompt tokens the server reports as served from its prefix cache


@runtime_checkable
class Model(Protocol):
    """An LLM backend: completes ``prompt`` and stops before the first of ``stop``.

    ``None`` for ``stop``, ``temperature`` or ``max_tokens`` means the backend's configured value; the
    configured stop is ``DEFAULT_STOP`` unless config/llm.yaml says otherwise (the improvement role
    writes whole transcripts, so it has none). ``stop=()`` asks for no stop string.

    ``until``: a streaming backend calls it with the text so far and stops reading (closing the
    stream) once it returns True; other backends may ignore it. ``timeout``: overall seconds for this
    call, retries included, when shorter than the configured one (a caller with a deadline).
    """

    name: str

    def generate(
        self,
        prompt: str,
        stop: Sequence[str] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        until: Callable[[str], bool] | None = None,
        timeout: float | None = None,
    ) -> Completion: ...


@dataclass(frozen=True)
class ToolCallRequest:
    """One native tool call a chat model asked for (OpenAI tools API): its id, tool name and the
    arguments as the model wrote them (a JSON object, not yet parsed)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatReply:
    """A chat model's answer to a conversation with tools: its text and the tool calls it asked for."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    completion: Completion


@runtime_checkable
class ToolChatModel(Protocol):
    """A backend that also takes a whole conversation with tool definitions (native tool calling).

    ``messages`` are OpenAI chat messages (``system``, ``user``, ``assistant`` with ``tool_calls``,
    ``tool`` with ``tool_call_id``); ``tools`` are OpenAI function tool definitions."""

    name: str

    def chat_tools(self, messages: Sequence[dict], tools: Sequence[dict], *, timeout: float | None = None) -> ChatReply: ...


CompletionListener = Callable[[Completion, str], None]
"""Called with every completion and the prompt it answered (e.g. to publish it on a topic)."""


def prompt_digest(prompt: str) -> str:
    """sha256 hex of the UTF-8 prompt text: the key under which a completion is recorded and replayed."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """Rough token count (about four characters a token) for backends that report no usage."""
    return math.ceil(len(text) / 4) if text else 0


def trim_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest stop string, and whether one was found.

    Servers that ignore ``stop`` (or models that stream past it) still give one console statement.
    """
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class RecordingModel:
    """Shared bookkeeping of the backends: a bounded ``history`` and ``on_completion`` listeners.

    Listeners are called in the generating thread after the completion is built; one that raises is a
    bug in the listener and propagates.
    """

    def __init__(self, name: str, *, history_size: int = 100, on_completion: CompletionListener | None = None) -> None:
        self.name = name
        self.history: deque[Completion] = deque(maxlen=history_size)
        self._listeners: list[CompletionListener] = [on_completion] if on_completion else []
        self._listeners_lock = threading.Lock()

    def add_listener(self, listener: CompletionListener) -> None:
        """Call ``listener(completion, prompt)`` after every completion from now on."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def _sampling(
        self, stop: Sequence[str] | None, temperature: float | None, max_tokens: int | None
    ) -> tuple[tuple[str, ...], float, int]:
        """The call's stop strings, temperature and token limit, the configured ones where ``None``."""
        stops = tuple(s for s in (getattr(self, "stop", DEFAULT_STOP) if stop is None else stop) if s)
        temp = getattr(self, "temperature", 0.0) if temperature is None else temperature
        limit = getattr(self, "max_tokens", 0) if max_tokens is None else max_tokens
        return stops, temp, limit

    def _record(self, completion: Completion, prompt: str) -> Completion:
        self.history.append(completion)
        role = self.name.split(":", 1)[0]  # the factory names a model "<role>:<model>"
        record_span("llm.call", completion.latency, {
            "llm.role": role, "llm.model": completion.model, "llm.prompt_digest": completion.prompt_digest,
            "llm.tokens_in": completion.prompt_tokens, "llm.tokens_cached": completion.cached_tokens,
            "llm.tokens_out": completion.completion_tokens, "llm.latency_s": round(completion.latency, 6),
            "llm.cost_usd": _prices().cost(completion, local=self.local), "llm.finish_reason": completion.finish_reason,
            "llm.attempts": completion.attempts, "llm.reply": completion.text})
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(completion, prompt)
        return completion

    @property
    def local(self) -> bool:
        """The model runs on this machine or network (its calls cost nothing)."""
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


@functools.cache
def _prices() -> PriceTable:
    """config/prices.yaml, read once per process (an unreadable file prices every call at 0, as unknown models)."""
    try:
        return PriceTable.load()
    except ConfigError:
        return PriceTable()
