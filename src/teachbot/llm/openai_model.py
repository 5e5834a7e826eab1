"""OpenAI-compatible HTTP backend (OpenAI, vLLM, Ollama, llama.cpp server) over the official ``openai`` package.

``mode: completions`` sends the prompt as it is to ``/v1/completions`` (the natural fit for a console
transcript). ``mode: chat`` sends it to ``/v1/chat/completions`` as one user message, or, when
``system_split`` is set and occurs in the prompt, the text before it as the system message and the
text after it as the user message (the marker itself is dropped). Either way the digest is taken over
the prompt as given.

Retries are ours, not the client's (it runs with ``max_retries=0``) so they are counted: 408/409/429,
5xx, timeouts and connection errors back off exponentially with jitter, capped at ``backoff_max``.
An empty completion is asked again with the temperature raised by ``empty_temperature_step`` per try
(as the core paper's code does), up to ``empty_retries`` times; if it stays empty, the empty
completion is returned and the caller decides.
"""

from __future__ import annotations

import ipaddress
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import openai

from teachbot.llm.base import (
    DEFAULT_STOP,
    Completion,
    CompletionListener,
    LLMError,
    RecordingModel,
    estimate_tokens,
    prompt_digest,
    trim_at_stop,
)

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


class OpenAIModel(RecordingModel):
    """``Model`` over an OpenAI-compatible endpoint; see the module docstring for modes and retries."""

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
        super().__init__(name or model, history_size=history_size, on_completion=on_completion)
        self.model, self.mode, self.system_split = model, mode, system_split
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        key = api_key or os.environ.get(api_key_env, "")
        if not key:
            if not is_local_url(self.base_url):
                raise LLMError(f"no API key for {self.base_url}: set the environment variable {api_key_env} (llm 'api_key_env' names it)")
            key = "EMPTY"  # vLLM, Ollama and llama.cpp accept any key
        self.temperature, self.max_tokens, self.max_tokens_param = temperature, max_tokens, max_tokens_param
        self.stop = tuple(stop)
        self.timeout, self.retries = timeout, retries
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.empty_retries, self.empty_temperature_step = empty_retries, empty_temperature_step
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=timeout, max_retries=0)

    def generate(
        self,
        prompt: str,
        stop: Sequence[str] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Complete ``prompt``; ``None`` arguments take the configured values (stop ``['>>>']`` by default)."""
        stops, base_temperature, limit = self._sampling(stop, temperature, max_tokens)
        start = time.monotonic()
        attempts = 0
        for empty_try in range(self.empty_retries + 1):
            temp = round(base_temperature + empty_try * self.empty_temperature_step, 6)
            try:
                response, used = self._request_with_retries(prompt, stops, temp, limit)
            except LLMError as exc:
                exc.attempts += attempts  # count the empty answers before the failure too
                raise
            attempts += used
            text, finish = self._extract(response)
            text, cut = trim_at_stop(text, stops)
            if text.strip():
                break
        usage = getattr(response, "usage", None)
        completion = Completion(
            text=text,
            model=getattr(response, "model", None) or self.model,
            prompt_digest=prompt_digest(prompt),
            prompt_tokens=getattr(usage, "prompt_tokens", None) or estimate_tokens(prompt),
            completion_tokens=getattr(usage, "completion_tokens", None) or estimate_tokens(text),
            latency=time.monotonic() - start,
            finish_reason="stop" if cut else (finish or ""),
            attempts=attempts,
        )
        return self._record(completion, prompt)

    def _request_with_retries(self, prompt: str, stop: tuple[str, ...], temperature: float, max_tokens: int) -> tuple[Any, int]:
        for attempt in range(1, self.retries + 2):
            try:
                return self._request(prompt, stop, temperature, max_tokens), attempt
            except _Retryable as exc:
                if attempt > self.retries:
                    raise LLMError(
                        f"LLM endpoint {self.base_url} still failing after {attempt} attempts (last: {exc.reason}); "
                        "check that the server is up and not overloaded, or raise 'retries'/'timeout' in config/llm.yaml",
                        attempts=attempt,
                    ) from None
                self._sleep(self._backoff(attempt, exc.retry_after))
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        delay = delay / 2 + self._rng.uniform(0, delay / 2)  # equal jitter: spread clients, keep a floor
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.backoff_max)

    def _request(self, prompt: str, stop: tuple[str, ...], temperature: float, max_tokens: int) -> Any:
        kwargs: dict[str, Any] = {"model": self.model, "temperature": temperature}
        if stop:
            kwargs["stop"] = list(stop)[:4]  # the OpenAI API takes at most four; the rest are trimmed client-side
        try:
            if self.mode == "completions":
                return self._client.completions.create(prompt=prompt, max_tokens=max_tokens, **kwargs)
            kwargs[self.max_tokens_param] = max_tokens
            return self._client.chat.completions.create(messages=self._messages(prompt), **kwargs)
        except openai.APITimeoutError:
            raise _Retryable(f"timed out after {self.timeout:g} s") from None
        except openai.APIConnectionError as exc:
            raise _Retryable(f"connection failed: {exc.__cause__ or exc}") from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status in RETRY_STATUS or status >= 500:
                raise _Retryable(f"HTTP {status}", _retry_after(exc)) from None
            raise LLMError(self._status_message(status, exc), attempts=1) from None
        except (openai.APIResponseValidationError, ValueError) as exc:
            raise LLMError(
                f"LLM endpoint {self.base_url} returned malformed JSON ({type(exc).__name__}); check that it speaks the OpenAI API",
                attempts=1,
            ) from None

    def _messages(self, prompt: str) -> list[dict[str, str]]:
        if self.system_split and self.system_split in prompt:
            system, user = prompt.split(self.system_split, 1)
            return [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return [{"role": "user", "content": prompt}]

    def _extract(self, response: Any) -> tuple[str, str]:
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError(f"LLM endpoint {self.base_url} returned no choices; check that it speaks the OpenAI API and serves {self.model}")
        choice = choices[0]
        holder = choice if self.mode == "completions" else getattr(choice, "message", None)
        text = getattr(holder, "text" if self.mode == "completions" else "content", None)
        return text or "", getattr(choice, "finish_reason", None) or ""

    def _status_message(self, status: int, exc: openai.APIStatusError) -> str:
        detail = str(getattr(exc, "message", "") or exc).splitlines()[0][:200]
        hint = {
            401: "check the API key (the variable named by 'api_key_env')",
            403: "check the API key's permissions for this model",
            404: f"check 'model' ({self.model!r}), 'base_url' and 'mode' ({self.mode})",
        }.get(status, "check the request settings in config/llm.yaml")
        return f"LLM endpoint {self.base_url} answered HTTP {status} ({detail}); {hint}"


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """Seconds from a numeric Retry-After header, if the server sent one."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None
