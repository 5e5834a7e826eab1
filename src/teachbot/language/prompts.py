"""The prompt format shared by every prompt teachbot sends: prompt texts from ``prompts/``, the section
headers of the interaction prompt, and where retrieved examples come from.

The interaction prompt itself is assembled by :class:`teachbot.console.prompt.PromptBuilder`; the
learner, the knowledge extractor, RAIDER and the evaluations' people read their prompts through
:func:`load_prompt` and recognise the interaction prompt's parts by the headers below.
"""

from __future__ import annotations

from typing import Protocol

from teachbot.errors import ConfigError
from teachbot.paths import share_dir

EXAMPLE_HEADER = "# Example interaction"
CURRENT_HEADER = "# Current interaction"


class ExampleSource(Protocol):
    """Where the interaction prompt's examples come from (the memory node, an episodic memory)."""

    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        """Up to ``k`` example transcripts for these instructions (newest last), most similar last."""
        ...


def load_prompt(name: str) -> str:
    """Text of ``prompts/<name>``; a missing file names the path."""
    path = share_dir() / "prompts" / name
    if not path.is_file():
        raise ConfigError(f"prompt file not found: {path}")
    return path.read_text()
