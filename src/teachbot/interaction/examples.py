"""Where the prompt's examples come from: the memory service, or the same store read locally.

The memory node serves retrieval; when it is slow or down the console reads the same store (learned
lessons included) in its own process with the same retrieval, and logs that it did, so a learned
lesson never silently vanishes from the prompt.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teachbot.errors import TeachbotError
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory


class MemoryUnavailable(TeachbotError):
    """The memory service did not answer (not running, or too slow)."""


def render_example(example: Any) -> str:
    """An example as the prompt shows it: a learned one with the condition it was taught under."""
    if example.source == "learned" and example.scope:
        return f"# learned lesson, applies {example.scope.rstrip('.')}: {example.improvement}\n{example.transcript}"
    return example.transcript


class LocalExamples:
    """The episodic memory opened in this process (on first use: loading the embedder takes seconds)."""

    def __init__(self, learned_dir: str | Path = "", config: str | Path | None = None, memory: Any = None) -> None:
        self.learned_dir, self.config = str(learned_dir), config
        self._memory = memory
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """The learned store's directory, for log lines."""
        if self._memory is not None:
            return str(self._memory.store.learned_dir)
        return str(self._settings().learned_dir)

    def _settings(self) -> Any:
        settings = MemoryConfig.load(self.config)
        if self.learned_dir:  # a store elsewhere keeps its knowledge next to it, as the memory node does
            learned = Path(self.learned_dir).expanduser().resolve()
            settings = dataclasses.replace(settings, learned_dir=learned, knowledge_dir=learned.parent / "knowledge")
        return settings

    def _open(self) -> Any:
        with self._lock:
            if self._memory is None:

                self._memory = EpisodicMemory.open(self._settings())
            return self._memory

    def memory(self) -> Any:
        """The EpisodicMemory (opened now if it was not yet)."""
        return self._open()

    def warm_up(self) -> None:
        """Open the store, load the embedder and index the examples now, so the first retrieval answers at once."""
        memory = self._open()
        memory.warm_up()
        memory.sync()

    def settings(self) -> Any:
        """The MemoryConfig this store is read with (the learned_dir override applied)."""
        return self._settings()

    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        found = self._open().retrieve(list(reversed(instructions)), profile, k)
        return [render_example(r.example) for r in found]


class FallbackExamples:
    """``remote`` (the memory service) first; on ``MemoryUnavailable`` the ``local`` store, logged once
    each time the service goes away and once when it is back."""

    def __init__(self, remote: Callable[[str, list[str], int], list[str]], local: LocalExamples,
                 log: Callable[[str], None]) -> None:
        self.remote, self.local, self.log = remote, local, log
        self.using_local = False

    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        try:
            found = self.remote(profile, instructions, k)
        except MemoryUnavailable as exc:
            if not self.using_local:
                self.log(f"{exc}; retrieving examples from the store in this process instead ({self.local.where})")
                self.using_local = True
            return self.local.examples(profile, instructions, k)
        if self.using_local:
            self.log("memory service answers again; retrieving examples through it")
            self.using_local = False
        return found
