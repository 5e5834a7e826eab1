"""OpenAI-compatible HTTP backend (OpenAI, vLLM, Ollama, llama.cpp server) over the official ``openai`` package.

``mode: chat`` sends the prompt to ``/v1/chat/completions``: the text before ``SYSTEM_END`` (or before
the configured ``system_split`` marker) as the system message, the rest as the user message, so the
static instructions come first and unchanged between steps (providers cache that prefix).
``mode: completions`` sends ``plain_prompt(prompt)`` to ``/v1/completions`` (base models). Either way
the digest is taken over the prompt as given.

What the endpoint accepts (``stop``, ``temperature``, ``max_tokens`` or ``max_completion_tokens``,
``reasoning_effort``, streaming) is configured (see ``capabilities.Capabilities``) and learned: an
HTTP 400 naming a parameter we sent is logged once (logger ``teachbot.llm``), remembered for that
base_url + model by every model of the process, and the request is sent again without it. Stop
strings are always cut client-side too, so dropping ``stop`` is safe.

``stream: true`` reads the reply as it is generated, cuts it at the first stop string and stops
reading (closing the stream, so the server stops generating) once ``until(text)`` holds:
``finish_reason`` "early". A stream the server breaks off is retried when nothing usable arrived
(no text, or, for a caller that passed ``until``, text ``until`` did not accept: the console would
otherwise run a statement cut short), else what arrived is returned with ``finish_reason``
"interrupted". A streamed request answered with something other than an event stream (a body of
garbage, or a server that ignores ``stream``) is one clear error, not retried.

Retries are ours, not the client's (it runs with ``max_retries=0``) so they are counted: 408/409/429,
5xx, timeouts and connection errors back off exponentially with jitter, capped at ``backoff_max``.
An empty completion is asked again with the temperature raised by ``empty_temperature_step`` per try
(as the core paper's code does), up to ``empty_retries`` times; if it stays empty, the empty
completion is returned and the caller decides. ``generate(timeout=...)`` is a deadline for the whole
call: each request waits at most what is left of it, and no retry starts past it.

``chat_tools(messages, tools)`` (``mode: chat`` only) is native tool calling: the conversation and the
OpenAI tool definitions go to ``/v1/chat/completions`` as they are, never streamed and without stop
strings, with the same retries, capabilities and deadline; an answer with neither text nor a tool call
counts as empty. It is recorded as ``tool_calls.conversation_prompt`` with the reply in
``tool_calls.render_reply`` form, so a recording replays through ``ScriptedModel.chat_tools``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import openai

from teachbot.llm.base import (
    DEFAULT_STOP,
    MALFORMED,
    REFUSED,
    UNREACHABLE,
    ChatReply,
    Completion,
    CompletionListener,
    LLMError,
    RecordingModel,
    ToolCallRequest,
    estimate_tokens,
    plain_prompt,
    prompt_digest,
    split_system,
    trim_at_stop,
)
from teachbot.llm.capabilities import MAX_TOKENS_PARAMS, REGISTRY, Capabilities, Diagnosis, diagnose
from teachbot.llm.tool_calls import calls_from_message, conversation_prompt, render_reply

logger = logging.getLogger("teachbot.llm")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRY_STATUS = frozenset({408, 409, 429})
MODES = ("chat", "completions")


def is_local_url(base_url: str) -> bool:
    """True for loopback and private-network hosts (local servers accept any API key)."""
    host = urlsplit(base_url).hostname or ""
    if host in ("localhost", "host.docker.internal") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_unspecified


class _Retryable(Exception):
    """A failed attempt worth repeating; ``reason`` goes into the final error message."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class _Learned(Exception):
    """The server refused a parameter we can drop; the capability is learned, send again."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(diagnosis.dropped)
        self.diagnosis = diagnosis


@dataclass(frozen=True)
class _Reply:
    """One answered request: text (streamed replies already cut at a stop), finish reason, usage."""

    text: str
    finish: str
    model: str
    usage: Any = None
    chunks: int = 0  # streamed chunks carrying text or reasoning (about one token each)
    calls: tuple[ToolCallRequest, ...] = ()  # native tool calls (``chat_tools``)


Send = Callable[[float, float | None, float | None], _Reply]
"""One request at (temperature, seconds left, deadline): an ``_Reply``, or ``_Retryable`` / ``_Learned`` / ``LLMError``."""


class OpenAIModel(RecordingModel):
    """``Model`` over an OpenAI-compatible endpoint; see the module docstring for modes, capabilities and retries."""

    def __init__(
        self,
        model: str,
        *,
        mode: str = "chat",
        base_url: str = "",
        api_key: str = "",
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 256,
        max_tokens_param: str = "max_tokens",
        stop: Sequence[str] = DEFAULT_STOP,
        stop_supported: bool = True,
        max_stop: int = 4,
        temperature_supported: bool = True,
        reasoning_effort: str = "",
        reasoning_budget: int = 0,
        stream: bool = False,
        timeout: float = 60.0,
        retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        empty_retries: int = 2,
        empty_temperature_step: float = 0.1,
        system_split: str = "",
        name: str = "",
        history_size: int = 100,
        on_completion: CompletionListener | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if mode not in MODES:
            raise LLMError(f"llm mode must be one of {', '.join(MODES)}, got {mode!r}; fix 'mode' in config/llm.yaml")
        if max_tokens_param not in MAX_TOKENS_PARAMS:
            raise LLMError(f"llm max_tokens_param must be one of {', '.join(MAX_TOKENS_PARAMS)}, got {max_tokens_param!r}")
        if max_stop < 0 or reasoning_budget < 0:
            raise LLMError(f"llm max_stop and reasoning_budget must be >= 0, got {max_stop} and {reasoning_budget}")
        super().__init__(name or model, history_size=history_size, on_completion=on_completion)
        self.model, self.mode, self.system_split = model, mode, system_split
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        key = api_key or os.environ.get(api_key_env, "")
        if not key:
            if not is_local_url(self.base_url):
                raise LLMError(f"no API key for {self.base_url}: set the environment variable {api_key_env} (llm 'api_key_env' names it)")
            key = "EMPTY"  # vLLM, Ollama and llama.cpp accept any key
        self.temperature, self.max_tokens = temperature, max_tokens
        self.stop = tuple(stop)
        self.capabilities = Capabilities(
            stop_supported=stop_supported, max_stop=max_stop, temperature_supported=temperature_supported,
            max_tokens_param=max_tokens_param, reasoning_effort=reasoning_effort, reasoning_budget=reasoning_budget, stream=stream,
        )
        self.timeout, self.retries = timeout, retries
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.empty_retries, self.empty_temperature_step = empty_retries, empty_temperature_step
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=timeout, max_retries=0)

    @property
    def local(self) -> bool:
        """A server on this machine or network: its calls cost nothing."""
        return is_local_url(self.base_url)

    @property
    def endpoint(self) -> tuple[str, str]:
        """The key capabilities are learned under: (base_url, model)."""
        return self.base_url, self.model

    @property
    def effective_capabilities(self) -> Capabilities:
        """The configured capabilities with what was learned about this endpoint on top."""
        return REGISTRY.effective(self.endpoint, self.capabilities)

    @property
    def max_tokens_param(self) -> str:
        """The chat-mode name of the token limit sent now (configured, or learned from a 400)."""
        return self.effective_capabilities.max_tokens_param

    def generate(
        self,
        prompt: str,
        stop: Sequence[str] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        until: Callable[[str], bool] | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Complete ``prompt``; ``None`` arguments take the configured values (stop ``['>>>']`` by default).

        ``until`` is used when streaming; ``timeout`` bounds the whole call, retries included.
        """
        stops, base_temperature, limit = self._sampling(stop, temperature, max_tokens)

        def send(temp: float, left: float | None, deadline: float | None) -> _Reply:
            return self._attempt(prompt, stops, temp, limit, until, left, deadline)

        reply, attempts, start = self._answered(send, base_temperature, timeout, lambda r: bool(trim_at_stop(r.text, stops)[0].strip()))
        text, cut = trim_at_stop(reply.text, stops)
        return self._complete(reply, prompt, text, "stop" if cut else reply.finish, attempts, start)

    def chat_tools(self, messages: Sequence[dict], tools: Sequence[dict], *, timeout: float | None = None) -> ChatReply:
        """Send a conversation with OpenAI function tools; the reply's text and the tool calls it asks for.

        Chat mode only; see the module docstring. ``timeout`` bounds the whole call, retries included.
        """
        if self.mode != "chat":
            raise LLMError(f"native tool calling needs mode: chat, but {self.model!r} at {self.base_url} runs in mode: {self.mode}; "
                           "set mode: chat for this role in config/llm.yaml, or use raider tool_calling: text")
        messages, tools = list(messages), list(tools)
        prompt = conversation_prompt(messages, tools)

        def send(temp: float, left: float | None, deadline: float | None) -> _Reply:
            return self._tool_attempt(messages, tools, temp, left)

        reply, attempts, start = self._answered(send, self.temperature, timeout, lambda r: bool(r.text.strip() or r.calls))
        completion = self._complete(reply, prompt, render_reply(reply.text, reply.calls), reply.finish, attempts, start)
        return ChatReply(reply.text, reply.calls, completion)

    def _answered(
        self, send: Send, temperature: float, timeout: float | None, usable: Callable[[_Reply], bool],
    ) -> tuple[_Reply, int, float]:
        """(reply, attempts, start): asked with retries, and again warmer while not ``usable`` (empty), within ``timeout``."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        attempts = 0
        for empty_try in range(self.empty_retries + 1):
            if empty_try and deadline is not None and time.monotonic() >= deadline:
                break  # no time left to ask again: the empty answer is returned
            temp = round(temperature + empty_try * self.empty_temperature_step, 6)
            try:
                reply, used = self._request_with_retries(send, temp, deadline)
            except LLMError as exc:
                exc.attempts += attempts  # count the empty answers before the failure too
                raise
            attempts += used
            if usable(reply):
                break
        return reply, attempts, start

    def _complete(self, reply: _Reply, prompt: str, text: str, finish: str, attempts: int, start: float) -> Completion:
        """The ``Completion`` of an answered call, recorded (history, listeners)."""
        prompt_tokens, completion_tokens, cached = _token_counts(reply, prompt, text)
        completion = Completion(
            text=text,
            model=reply.model or self.model,
            prompt_digest=prompt_digest(prompt),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency=time.monotonic() - start,
            finish_reason=finish,
            attempts=attempts,
            cached_tokens=cached,
        )
        return self._record(completion, prompt)

    def _request_with_retries(self, send: Send, temperature: float, deadline: float | None) -> tuple[_Reply, int]:
        attempt = failures = 0
        learned: set[str] = set()
        reason = ""
        while True:
            attempt += 1
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._deadline_error(attempt - 1, reason)
            try:
                return send(temperature, left, deadline), attempt
            except _Learned as exc:
                if learned & exc.diagnosis.changes.keys():
                    raise LLMError(f"LLM endpoint {self.base_url} refused {exc.diagnosis.dropped} again; "
                                   f"set '{exc.diagnosis.config_hint}' in config/llm.yaml", attempts=attempt,
                                   kind=REFUSED) from None
                learned |= exc.diagnosis.changes.keys()
                reason = f"refused {exc.diagnosis.dropped}"
            except _Retryable as exc:
                failures += 1
                reason = exc.reason
                if failures > self.retries:
                    raise LLMError(
                        f"LLM endpoint {self.base_url} still failing after {attempt} attempts (last: {exc.reason}); "
                        "check that the server is up and not overloaded, or raise 'retries'/'timeout' in config/llm.yaml",
                        attempts=attempt, kind=UNREACHABLE,
                    ) from None
                delay = self._backoff(failures, exc.retry_after)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise self._deadline_error(attempt, reason) from None
                self._sleep(delay)

    def _deadline_error(self, attempts: int, reason: str) -> LLMError:
        last = f" (last: {reason})" if reason else ""
        return LLMError(f"LLM endpoint {self.base_url}: the caller's deadline passed after {attempts} attempts{last}; "
                        "no retry started past it. Check the server's load, or give the call more time", attempts=attempts,
                        kind=UNREACHABLE)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        delay = delay / 2 + self._rng.uniform(0, delay / 2)  # equal jitter: spread clients, keep a floor
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.backoff_max)

    def _params(self, caps: Capabilities, stop: tuple[str, ...], temperature: float, max_tokens: int) -> dict[str, Any]:
        """The request's parameters, as far as the endpoint takes them."""
        params: dict[str, Any] = {"model": self.model}
        if caps.temperature_supported:
            params["temperature"] = temperature
        if stop and caps.stop_supported and caps.max_stop > 0:
            params["stop"] = list(stop[: caps.max_stop])  # the rest are cut client-side
        limit = max_tokens + caps.reasoning_budget
        if self.mode == "completions":
            params["max_tokens"] = limit
        else:
            params[caps.max_tokens_param] = limit
            if caps.reasoning_effort:
                params["reasoning_effort"] = caps.reasoning_effort
        if caps.stream:
            params["stream"] = True
            if caps.stream_usage:
                params["stream_options"] = {"include_usage": True}
        return params

    def _attempt(
        self, prompt: str, stop: tuple[str, ...], temperature: float, max_tokens: int,
        until: Callable[[str], bool] | None, left: float | None, deadline: float | None,
    ) -> _Reply:
        caps = self.effective_capabilities
        params = self._params(caps, stop, temperature, max_tokens)
        if self.mode == "completions":
            create = lambda client: client.completions.create(prompt=plain_prompt(prompt), **params)
        else:
            create = lambda client: client.chat.completions.create(messages=self.messages(prompt), **params)
        response = self._send(create, params, caps, left)
        if params.get("stream"):  # read outside ``_send``'s handlers: ``until`` is the caller's code
            return self._read_stream(response, stop, until, deadline)
        text, finish = self._extract(response)
        return _Reply(text, finish, getattr(response, "model", None) or "", getattr(response, "usage", None))

    def _tool_attempt(self, messages: list[dict], tools: list[dict], temperature: float, left: float | None) -> _Reply:
        caps = replace(self.effective_capabilities, stream=False)  # tool calls are read whole
        params = self._params(caps, (), temperature, self.max_tokens)
        if tools:
            params["tools"] = tools
        response = self._send(lambda client: client.chat.completions.create(messages=messages, **params), params, caps, left)
        text, finish = self._extract(response)
        calls = calls_from_message(getattr(response.choices[0], "message", None))
        return _Reply(text, finish, getattr(response, "model", None) or "", getattr(response, "usage", None), calls=calls)

    def _send(self, create: Callable[[openai.OpenAI], Any], params: dict[str, Any], caps: Capabilities, left: float | None) -> Any:
        """``create(client)`` waiting at most ``left``; its failures as ``_Retryable``, ``_Learned`` or ``LLMError``."""
        wait = self.timeout if left is None else min(self.timeout, left)
        try:
            return create(self._client.with_options(timeout=wait))
        except openai.APITimeoutError:
            raise _Retryable(f"timed out after {wait:.3g} s") from None
        except openai.APIConnectionError as exc:
            raise _Retryable(f"connection failed: {exc.__cause__ or exc}") from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status in RETRY_STATUS or status >= 500:
                raise _Retryable(f"HTTP {status}", _retry_after(exc)) from None
            if status == 400:
                self._learn(exc, params, caps)
            raise LLMError(self._status_message(status, exc), attempts=1, kind=REFUSED, status=status) from None
        except (openai.APIResponseValidationError, ValueError) as exc:
            raise LLMError(
                f"LLM endpoint {self.base_url} returned malformed JSON ({type(exc).__name__}); check that it speaks the OpenAI API",
                attempts=1, kind=MALFORMED,
            ) from None

    def _learn(self, exc: openai.APIStatusError, params: dict[str, Any], caps: Capabilities) -> None:
        """Raise ``_Learned`` when the 400 names a parameter we sent and can do without; log it once."""
        diagnosis = diagnose(_error_detail(exc), exc.param, params, caps)
        if diagnosis is None:
            return
        if REGISTRY.learn(self.endpoint, diagnosis.changes):
            logger.warning(
                "LLM endpoint %s (model %s) refused %s; sending it no more for this endpoint. "
                "Set '%s' for this role in config/llm.yaml to skip this round trip", self.base_url, self.model,
                diagnosis.dropped, diagnosis.config_hint,
            )
        raise _Learned(diagnosis)

    def _read_stream(self, stream: Any, stop: tuple[str, ...], until: Callable[[str], bool] | None, deadline: float | None) -> _Reply:
        """Accumulate a streamed reply; close the stream at a stop string, once ``until`` holds, or at the deadline."""
        text, finish, model, usage, chunks = "", "", "", None, 0

        def unusable() -> bool:  # a caller with ``until`` gets no half statement: until(text) was False so far
            return not text.strip() or until is not None

        with stream:  # closing it on leaving hangs up: the server stops generating
            kind = str(getattr(getattr(stream, "response", None), "headers", {}).get("content-type", ""))
            if kind and "text/event-stream" not in kind:
                raise LLMError(f"LLM endpoint {self.base_url} answered a streamed request with {kind.split(';')[0]}, not an "
                               "event stream; check that it speaks the OpenAI API, or set 'stream: false' for this role in "
                               "config/llm.yaml", attempts=1, kind=MALFORMED)
            chunk_iter = iter(stream)
            while True:
                try:
                    chunk = next(chunk_iter)
                except StopIteration:
                    break
                except openai.APIError as exc:  # connection dropped, read timeout, or an error event mid-stream
                    reason = "timed out" if isinstance(exc, openai.APITimeoutError) else f"stream cut ({exc.__cause__ or exc})"
                    if unusable():
                        raise _Retryable(f"{reason} after {chunks} chunks") from None
                    return _Reply(text, "interrupted", model, usage, chunks)
                except ValueError as exc:
                    raise LLMError(f"LLM endpoint {self.base_url} streamed malformed JSON ({type(exc).__name__}); "
                                   "check that it speaks the OpenAI API, or set 'stream: false'", attempts=1,
                                   kind=MALFORMED) from None
                model = getattr(chunk, "model", None) or model
                usage = getattr(chunk, "usage", None) or usage
                choices = getattr(chunk, "choices", None) or []
                if not choices:
                    continue
                piece, thought = self._delta(choices[0])
                chunks += bool(piece or thought)
                finish = getattr(choices[0], "finish_reason", None) or finish
                if piece:
                    text, cut = trim_at_stop(text + piece, stop)
                    if cut:
                        finish = "stop"
                        break
                    if until is not None and until(text):
                        finish = "early"
                        break
                if deadline is not None and not finish and time.monotonic() >= deadline:
                    if unusable():
                        raise _Retryable("the deadline passed while the reply streamed")
                    finish = "deadline"
                    break
        if not finish:  # ended without a finish reason: the server broke off
            if unusable():
                raise _Retryable(f"stream ended without a finish reason after {chunks} chunks")
            finish = "interrupted"
        return _Reply(text, finish, model, usage, chunks)

    def _delta(self, choice: Any) -> tuple[str, str]:
        """(text, reasoning) of one streamed choice; reasoning (vLLM, DeepSeek, Ollama) is counted, not kept."""
        if self.mode == "completions":
            return getattr(choice, "text", None) or "", ""
        delta = getattr(choice, "delta", None)
        thought = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None) or ""
        return getattr(delta, "content", None) or "", thought if isinstance(thought, str) else ""

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """The chat messages ``prompt`` is sent as: system (static part) and user, or the user message alone."""
        if self.system_split and self.system_split in prompt:
            system, user = prompt.split(self.system_split, 1)
        else:
            system, user = split_system(prompt)
        if not system:
            return [{"role": "user", "content": user}]
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _extract(self, response: Any) -> tuple[str, str]:
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError(f"LLM endpoint {self.base_url} returned no choices; check that it speaks the OpenAI API and serves {self.model}",
                           kind=MALFORMED)
        choice = choices[0]
        holder = choice if self.mode == "completions" else getattr(choice, "message", None)
        text = getattr(holder, "text" if self.mode == "completions" else "content", None)
        return text or "", getattr(choice, "finish_reason", None) or ""

    def _status_message(self, status: int, exc: openai.APIStatusError) -> str:
        detail = _error_detail(exc).splitlines()[0][:200] if _error_detail(exc) else str(status)
        hint = {
            400: "the server rejected the request; if the message names a parameter, configure the endpoint's "
                 "capabilities in config/llm.yaml (stop_supported, temperature_supported, max_tokens_param, reasoning_effort, "
                 "stream); a prompt over the model's context needs a shorter transcript or fewer examples",
            401: "check the API key (the variable named by 'api_key_env')",
            403: "check the API key's permissions for this model",
            404: f"check 'model' ({self.model!r}), 'base_url' and 'mode' ({self.mode})",
        }.get(status, "check the request settings in config/llm.yaml")
        return f"LLM endpoint {self.base_url} answered HTTP {status} ({detail}); {hint}"


def _error_detail(exc: openai.APIStatusError) -> str:
    """The server's own error message (the body's ``message``), else the client's."""
    body = exc.body if isinstance(exc.body, dict) else {}
    message = body.get("message")
    return message if isinstance(message, str) and message else str(getattr(exc, "message", "") or exc)


def _token_counts(reply: _Reply, prompt: str, text: str) -> tuple[int, int, int]:
    """(prompt, completion, cached) tokens: the server's usage where it sent one, else estimates or chunk counts.

    OpenAI's ``completion_tokens`` include the (billed) reasoning tokens; a server that reports more
    reasoning tokens than completion tokens left them out, and they are added.
    """
    usage = reply.usage
    prompt_tokens = getattr(usage, "prompt_tokens", None) or estimate_tokens(prompt)
    completion = getattr(usage, "completion_tokens", None) or reply.chunks or estimate_tokens(text)
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None) or 0
    if reasoning > completion:
        completion += reasoning
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None) or 0
    return prompt_tokens, completion, min(cached, prompt_tokens)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """Seconds from a numeric Retry-After header, if the server sent one."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None
