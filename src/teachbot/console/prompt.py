"""Prompt construction: base prompt with the generated import block, retrieved examples, transcript.

The static part comes first so that providers' prefix caching applies: base prompt (fixed per
profile), then the examples (fixed while the instructions do not change), then the current
transcript, ending with ``>>> ``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from teachbot.console.registry import RobotApi
from teachbot.console.transcript import PROMPT, Transcript
from teachbot.errors import ConfigError
from teachbot.paths import share_dir

EXAMPLE_HEADER = "# Example interaction"
CURRENT_HEADER = "# Current interaction"


class ExampleSource(Protocol):
    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        """Up to ``k`` example transcripts for these instructions (newest last), most similar last."""
        ...


def load_prompt(name: str) -> str:
    """Text of ``prompts/<name>``; a missing file names the path."""
    path = share_dir() / "prompts" / name
    if not path.is_file():
        raise ConfigError(f"prompt file not found: {path}")
    return path.read_text()


class FileExamples:
    """Examples from ``memory_store/<profile>/*.txt`` when the memory node is not running.

    Ranked by word overlap with the newest instructions (the memory node ranks by embeddings);
    an empty store simply gives no examples.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or share_dir() / "memory_store"

    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        files = sorted((self.root / profile).glob("*.txt")) if (self.root / profile).is_dir() else []
        texts = [f.read_text().strip() for f in files]
        query = _words(" ".join(instructions[-3:]))
        scored = sorted(
            enumerate(texts),
            key=lambda item: (len(query & _words(" ".join(Transcript.parse(item[1]).instructions()))), -item[0]),
        )
        return [text for _, text in scored[-k:]] if k > 0 else []


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


@dataclass
class PromptBuilder:
    """Builds the interaction prompt for one robot API profile."""

    api: RobotApi
    base_template: str
    examples: ExampleSource | None = None
    k: int = 16

    @classmethod
    def for_profile(cls, api: RobotApi, examples: ExampleSource | None = None, k: int = 16) -> PromptBuilder:
        return cls(api, load_prompt(f"console_{api.profile}.txt"), examples, k)

    def base(self) -> str:
        return self.base_template.replace("{api}", self.api.import_block()).rstrip() + "\n"

    def build(self, transcript: Transcript) -> str:
        parts = [self.base()]
        if self.examples is not None and self.k > 0:
            for text in self.examples.examples(self.api.profile, transcript.instructions(), self.k):
                parts.append(f"\n{EXAMPLE_HEADER}\n{text.rstrip()}\n")
        parts.append(f"\n{CURRENT_HEADER}\n")
        rendered = transcript.render()
        return "".join(parts) + (rendered + "\n" if rendered else "") + PROMPT
