"""What an OpenAI-compatible endpoint accepts, configured in config/llm.yaml and learned from its 400s.

Reasoning models refuse ``stop`` and any non-default ``temperature``, newer OpenAI models want
``max_completion_tokens`` instead of ``max_tokens``, some servers know no ``reasoning_effort`` or
``stream_options``. ``Capabilities`` holds the configured answer to each question; when a server
answers HTTP 400 naming a parameter we sent, ``diagnose`` says what to change, the shared
``REGISTRY`` remembers it for that base_url + model (every ``OpenAIModel`` of that endpoint, so the
roles learn together) and the call is retried once without it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

MAX_TOKENS_PARAMS = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True)
class Capabilities:
    """The request parameters an endpoint takes; the defaults suit OpenAI's non-reasoning models and local servers."""

    stop_supported: bool = True  # False: no ``stop`` sent; stop strings are cut client-side anyway
    max_stop: int = 4  # only this many stop strings are sent; the rest are cut client-side
    temperature_supported: bool = True  # False: no ``temperature`` sent (the server's fixed default applies)
    max_tokens_param: str = "max_tokens"  # chat mode: or ``max_completion_tokens``
    reasoning_effort: str = ""  # chat mode: '' = not sent; else passed through (low, medium, high, ...)
    reasoning_budget: int = 0  # tokens added to the limit sent (reasoning counts against it)
    stream: bool = False  # stream the reply (``stream=True``) and stop reading once the caller has enough
    stream_usage: bool = True  # streaming: ask for a final usage chunk (``stream_options.include_usage``)


@dataclass(frozen=True)
class Diagnosis:
    """What a 400 asks us to change: capability overrides, what was dropped, the config line that avoids it."""

    changes: dict[str, Any]
    dropped: str  # e.g. "'stop' (stop strings are now cut client-side only)"
    config_hint: str  # e.g. "stop_supported: false"


_REFUSAL = re.compile(
    r"unsupported|not supported|unrecognized|unknown|not permitted|does not support|not allowed|extra (?:inputs|fields)|only the default",
    re.IGNORECASE,
)


def _named(message: str, param: str | None, sent: Mapping[str, Any]) -> str | None:
    """The parameter we sent that the error names: its ``param`` field, else the first quoted name in the message."""
    if param and param.split(".")[0] in sent:
        return param.split(".")[0]
    hits = [(m.start(), m.group(1)) for m in re.finditer(r"['\"`]([a-z_]+)(?:\.[a-z_]+)?['\"`]", message) if m.group(1) in sent]
    if not hits:  # "Unrecognized request argument supplied: reasoning_effort"
        hits = [(m.start(), m.group(0)) for m in re.finditer(r"\b[a-z]+(?:_[a-z]+)+\b|\b(?:stop|temperature|stream)\b", message)
                if m.group(0) in sent]
    return min(hits)[1] if hits else None


def diagnose(message: str, param: str | None, sent: Mapping[str, Any], caps: Capabilities) -> Diagnosis | None:
    """The change a 400 with ``message`` (and the body's ``param``) calls for, or None when it names nothing we can drop.

    ``sent`` is the request's parameters; only those are considered, so a second 400 about a
    parameter already dropped is not "learned" again.
    """
    name = _named(message, param, sent)
    if name == "stop":
        limit = re.search(r"maximum (?:length|number of items)[^0-9]{0,20}(\d+)", message)
        sent_count = len(sent["stop"]) if isinstance(sent["stop"], list) else 1
        if limit and 0 < int(limit.group(1)) < sent_count:
            n = int(limit.group(1))
            return Diagnosis({"max_stop": n}, f"all but {n} stop strings (the rest are cut client-side)", f"max_stop: {n}")
    if name is None or not _REFUSAL.search(message):
        return None  # e.g. "'max_tokens' is too large": a value to fix, not a parameter to drop
    if name == "stop":
        return Diagnosis({"stop_supported": False}, "'stop' (stop strings are cut client-side only)", "stop_supported: false")
    if name == "temperature":
        return Diagnosis({"temperature_supported": False}, "'temperature' (the server's default applies)", "temperature_supported: false")
    if name in MAX_TOKENS_PARAMS:
        other = MAX_TOKENS_PARAMS[1 - MAX_TOKENS_PARAMS.index(name)]
        if caps.max_tokens_param == name:
            return Diagnosis({"max_tokens_param": other}, f"'{name}' (sending '{other}' instead)", f"max_tokens_param: {other}")
        return None
    if name == "reasoning_effort":
        return Diagnosis({"reasoning_effort": ""}, "'reasoning_effort'", 'reasoning_effort: ""')
    if name == "stream_options":
        return Diagnosis({"stream_usage": False}, "'stream_options' (token counts of streamed replies are chunk counts)",
                         "stream: false, or use a server that reports usage")
    if name == "stream":
        return Diagnosis({"stream": False}, "'stream' (replies are read whole)", "stream: false")
    return None


class CapabilityRegistry:
    """What was learned per (base_url, model), shared by all models of the process; thread-safe."""

    def __init__(self) -> None:
        self._learned: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def effective(self, key: tuple[str, str], configured: Capabilities) -> Capabilities:
        """``configured`` with what was learned about ``key`` on top."""
        with self._lock:
            learned = dict(self._learned.get(key, {}))
        return replace(configured, **learned) if learned else configured

    def learn(self, key: tuple[str, str], changes: Mapping[str, Any]) -> bool:
        """Remember ``changes`` for ``key``; False when they were all known already (another thread learned first)."""
        with self._lock:
            learned = self._learned.setdefault(key, {})
            new = {k: v for k, v in changes.items() if learned.get(k, object()) != v}
            learned.update(new)
        return bool(new)

    def learned(self, key: tuple[str, str]) -> dict[str, Any]:
        """A copy of what was learned about ``key``."""
        with self._lock:
            return dict(self._learned.get(key, {}))

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._learned.clear()


REGISTRY = CapabilityRegistry()
"""The process-wide registry every ``OpenAIModel`` consults and teaches."""
