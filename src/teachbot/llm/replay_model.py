"""The LLM of a replay: recorded completions, matched by prompt digest. ROS-free.

A prompt whose digest is not in the recording means the session diverged (a changed prompt file,
config, memory or code): the model reports a :class:`Divergence` with a unified diff against the
prompt the recording had at that point, and fails the call, so the replay stops there.
"""

from __future__ import annotations

import difflib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teachbot.llm.base import Completion, LLMError, RecordingModel, estimate_tokens, prompt_digest
from teachbot.recording.bag import RecordedCompletion

DIFF_CONTEXT = 2  # lines of context around each changed line


@dataclass(frozen=True)
class Divergence:
    """The first prompt of a replay that the recording does not have."""

    role: str
    index: int              # how many completions of this role had been replayed before it
    expected_digest: str    # the digest the recording has at this position ("" past its end)
    actual_digest: str
    diff: str               # unified diff recorded -> replayed prompt

    def render(self) -> str:
        """Several lines: where it diverged, then the diff."""
        head = (f"first divergence: {self.role} prompt #{self.index + 1} has digest {self.actual_digest[:12]}, "
                f"the recording has {self.expected_digest[:12] or 'no further prompt'}")
        return f"{head}\n{self.diff}" if self.diff else head


def prompt_diff(expected: str, actual: str, context: int = DIFF_CONTEXT) -> str:
    """Unified diff of two prompts (recorded first)."""
    lines = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "recorded prompt", "replayed prompt",
                                 n=context, lineterm="")
    return "\n".join(lines)


class ReplayModel(RecordingModel):
    """``Model`` answering one role's prompts from its recorded completions."""

    def __init__(self, role: str, records: Sequence[RecordedCompletion],
                 on_divergence: Callable[[Divergence], None] | None = None) -> None:
        super().__init__(f"{role}:replay", history_size=1000)
        self.role = role
        self.records = list(records)
        self._by_digest: dict[str, deque[str]] = {}
        for record in self.records:
            self._by_digest.setdefault(record.prompt_digest, deque()).append(record.text)
        self.on_divergence = on_divergence or (lambda _d: None)
        self.divergence: Divergence | None = None
        self.served = 0
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    @property
    def exhausted(self) -> bool:
        """Every recorded completion of this role has been replayed."""
        return self.served >= len(self.records)

    def generate(self, prompt: str, stop: Sequence[str] | None = None, *, temperature: float | None = None,
                 max_tokens: int | None = None, until: Callable[[str], bool] | None = None,
                 timeout: float | None = None) -> Completion:
        """The recorded answer to ``prompt``; an unknown prompt is a divergence (LLMError)."""
        start = time.monotonic()
        digest = prompt_digest(prompt)
        with self._lock:
            self.prompts.append(prompt)
            queue = self._by_digest.get(digest)
            if not queue:
                divergence = self._diverged(prompt, digest)
            else:
                text = queue.popleft()
                self.served += 1
                divergence = None
        if divergence is not None:
            self.on_divergence(divergence)
            raise LLMError(divergence.render().splitlines()[0])
        completion = Completion(text=text, model=self.name, prompt_digest=digest, prompt_tokens=estimate_tokens(prompt),
                                completion_tokens=estimate_tokens(text), latency=time.monotonic() - start,
                                finish_reason="stop")
        return self._record(completion, prompt)

    def _diverged(self, prompt: str, digest: str) -> Divergence:
        expected = self.records[self.served] if self.served < len(self.records) else None
        if expected is None:
            diff = "(the recording has no further prompt for this role: the replay asked the LLM more often)"
        elif not expected.prompt:
            diff = "(the recording stored only the digest of this prompt, not its text)"
        else:
            diff = prompt_diff(expected.prompt, prompt)
        divergence = Divergence(self.role, self.served, expected.prompt_digest if expected else "", digest, diff)
        if self.divergence is None:
            self.divergence = divergence
        return divergence
