"""Scripted and replayed completions: the LLM of tests, demos without a model, and rosbag replay.

Three sources, tried in this order for each prompt:
- ``replay``: a mapping prompt digest -> text (or a list of texts, used in order when the same
  prompt was asked more than once), as published on the completion topic of a recorded session;
- ``respond``: a callable prompt -> text;
- ``completions``: texts returned in order.
Every text is cut at the first stop string, as a real model stops there.

With ``native_tools=True`` the model is also a ``ToolChatModel``: ``chat_tools(messages, tools)`` takes
its answer from the same sources, keyed by ``tool_calls.conversation_prompt(messages, tools)`` (the JSON
string ``respond`` receives and ``prompts`` records): plain text is a reply without tool calls, a JSON
object ``{"content": "...", "tool_calls": [{"id": "...", "name": "...", "arguments": {...} or "..."}]}``
one with them (the form ``OpenAIModel.chat_tools`` records, so recorded sessions replay). Without it the
model stands in for a backend that has no native tool calling (``chat_tools`` is None).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from teachbot.llm.base import (
    DEFAULT_STOP,
    ChatReply,
    Completion,
    CompletionListener,
    LLMError,
    RecordingModel,
    estimate_tokens,
    prompt_digest,
    trim_at_stop,
)
from teachbot.llm.tool_calls import conversation_prompt, parse_reply, render_reply

BAG_SUFFIXES = (".mcap", ".db3")  # rosbag2 storage files; their directory holds the bag's metadata.yaml


class ScriptedModel(RecordingModel):
    """``Model`` that answers from a script; ``prompts`` holds every prompt it was asked, in order."""

    def __init__(
        self,
        completions: Iterable[str] = (),
        *,
        respond: Callable[[str], str] | None = None,
        replay: Mapping[str, str | Sequence[str]] | None = None,
        stop: Sequence[str] = DEFAULT_STOP,
        name: str = "scripted",
        history_size: int = 1000,
        on_completion: CompletionListener | None = None,
        native_tools: bool = False,
    ) -> None:
        super().__init__(name, history_size=history_size, on_completion=on_completion)
        if not native_tools:  # a protocol method set to None is absent: no ToolChatModel
            self.chat_tools = None  # type: ignore[assignment]
        self._queue: deque[str] = deque(completions)
        self._respond = respond
        self._replay: dict[str, deque[str]] = {
            digest: deque([texts] if isinstance(texts, str) else texts) for digest, texts in (replay or {}).items()
        }
        self.stop = tuple(stop)
        self.prompts: list[str] = []
        self.served = 0
        self._lock = threading.Lock()

    @classmethod
    def from_records(cls, path: str | Path, *, role: str | None = None, **kwargs: object) -> ScriptedModel:
        """Replay model from a recorded session: a rosbag2 directory written by teachbot's recorder (or a
        .mcap/.db3 file inside one), or a JSON Lines file of ``{"prompt_digest": ..., "text": ...}`` records.

        From a bag it takes the completions of ``role`` (default: the role in a ``name`` such as
        ``"interaction:replay"``, as the LLM factory names its models; all roles when neither says one),
        keyed by prompt digest in the order they were asked for.
        """
        path = Path(path)
        if path.is_dir() or path.suffix in BAG_SUFFIXES:
            name = str(kwargs.get("name", ""))
            replay = _bag_completions(path, role or (name.partition(":")[0] if ":" in name else None))
            return cls(replay=replay, **kwargs)  # type: ignore[arg-type]
        replay: dict[str, list[str]] = {}
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise LLMError(f"cannot read LLM replay file {path}: {exc.strerror}; check the 'replay' path in config/llm.yaml") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                replay.setdefault(str(record["prompt_digest"]), []).append(str(record["text"]))
            except (ValueError, KeyError, TypeError):
                raise LLMError(f"{path} line {number}: expected a JSON object with 'prompt_digest' and 'text'") from None
        return cls(replay=replay, **kwargs)  # type: ignore[arg-type]

    def push(self, *texts: str) -> None:
        """Queue more completions (tests that script a session step by step)."""
        with self._lock:
            self._queue.extend(texts)

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
        """Next scripted text for ``prompt``; ``temperature`` and ``max_tokens`` are ignored."""
        start = time.monotonic()
        digest = prompt_digest(prompt)
        with self._lock:
            self.prompts.append(prompt)
            raw = self._next(prompt, digest)
            self.served += 1
        text, _ = trim_at_stop(raw, self.stop if stop is None else stop)
        completion = Completion(
            text=text,
            model=self.name,
            prompt_digest=digest,
            prompt_tokens=estimate_tokens(prompt),
            completion_tokens=estimate_tokens(text),
            latency=time.monotonic() - start,
            finish_reason="stop",
        )
        return self._record(completion, prompt)

    def chat_tools(self, messages: Sequence[dict], tools: Sequence[dict], *, timeout: float | None = None) -> ChatReply:
        """Next scripted reply to a conversation with tools (``native_tools=True``; see the module docstring)."""
        start = time.monotonic()
        prompt = conversation_prompt(messages, tools)
        digest = prompt_digest(prompt)
        with self._lock:
            self.prompts.append(prompt)
            raw = self._next(prompt, digest)
            self.served += 1
        text, calls = parse_reply(raw)
        rendered = render_reply(text, calls)
        completion = Completion(
            text=rendered,
            model=self.name,
            prompt_digest=digest,
            prompt_tokens=estimate_tokens(prompt),
            completion_tokens=estimate_tokens(rendered),
            latency=time.monotonic() - start,
            finish_reason="tool_calls" if calls else "stop",
        )
        return ChatReply(text, calls, self._record(completion, prompt))

    def _next(self, prompt: str, digest: str) -> str:
        if self._replay:
            texts = self._replay.get(digest)
            if texts:
                return texts.popleft()
            if not (self._respond or self._queue):
                state = "was already replayed" if texts is not None else "is not in the recording"
                raise LLMError(
                    f"no recorded completion for prompt digest {digest}: it {state}; the prompt differs from the recorded "
                    "session (same prompts/, memory_store/ and config?) or the recording is incomplete"
                )
        if self._respond is not None:
            return self._respond(prompt)
        if not self._queue:
            raise LLMError(f"scripted model exhausted after {self.served} completions; the session asked for more")
        return self._queue.popleft()


def _bag_completions(path: Path, role: str | None) -> dict[str, list[str]]:
    """Prompt digest -> recorded texts (in session order) of ``role`` (every role when None) in a session bag."""
    from teachbot.recording.bag import BagError, RecordedSession  # deferred: rosbags, only to replay a session bag

    bag = path if path.is_dir() else path.parent
    try:
        session = RecordedSession.load(bag)
    except BagError as exc:
        raise LLMError(f"cannot use {path} as an LLM replay source: {exc}") from None
    replay: dict[str, list[str]] = {}
    for record in session.completions if role is None else session.completions_for(role):
        replay.setdefault(record.prompt_digest, []).append(record.text)
    return replay
