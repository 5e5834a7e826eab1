"""A token budget for the interaction prompt: estimate its size, and trim it in a stated order.

Prompt tokens are estimated from characters, with the characters-per-token ratio calibrated from the
``usage`` the server returns (a running average over real calls). When a prompt would not leave room
for the reply inside the model's context, the least similar examples are dropped first (they come
first in the prompt, the most similar last), then the oldest console outputs are shortened with a
marker. The system part (role, rules, robot API) and the person's words are never touched.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from teachbot.errors import TeachbotError

SHORTENED = "... [output shortened to fit the context]"
KEEP_CHARS = 60  # of a shortened output: enough to see what kind of value it was


class PromptTooLong(TeachbotError):
    """The prompt exceeds the context even with no examples and every old output shortened."""


@dataclass
class TrimReport:
    """What ``fit`` took out of one prompt (empty when it fitted as it was)."""

    tokens_before: int = 0
    tokens_after: int = 0
    dropped_examples: int = 0
    shortened_outputs: int = 0

    def __bool__(self) -> bool:
        return bool(self.dropped_examples or self.shortened_outputs)

    def line(self) -> str:
        return (f"prompt of ~{self.tokens_before} tokens trimmed to ~{self.tokens_after}: "
                f"{self.dropped_examples} least similar examples dropped, {self.shortened_outputs} old outputs shortened")


@dataclass
class TokenBudget:
    """``context_tokens`` of the model (0: no limit), ``reserve_tokens`` kept free for its reply."""

    context_tokens: int = 0
    reserve_tokens: int = 256
    chars_per_token: float = 4.0
    smoothing: float = 0.3  # weight of the newest calibration sample
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def limit(self) -> int:
        """Prompt tokens allowed (0: unlimited)."""
        return max(1, self.context_tokens - self.reserve_tokens) if self.context_tokens > 0 else 0

    def estimate(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0

    def fits(self, text: str) -> bool:
        return self.limit == 0 or self.estimate(text) <= self.limit

    def calibrate(self, prompt_chars: int, prompt_tokens: int) -> None:
        """Learn the ratio from a prompt the server counted (ignores implausible samples)."""
        if prompt_chars < 200 or prompt_tokens <= 0:
            return
        ratio = prompt_chars / prompt_tokens
        if not 1.0 <= ratio <= 8.0:
            return
        with self._lock:
            self.chars_per_token += self.smoothing * (ratio - self.chars_per_token)
