"""The stand-in for the LLM that picks, in DROC's retrieval, the previous tasks of a new task's category.

``SelectionDouble`` answers prompts/droc_select_tasks.txt from that prompt alone: its last "Previous tasks:"
line (numbered) and its "New task:" line. A task's category is its verb phrase, as the prompt's example
has it ("open" and "put" are different categories): the first word and, when the next one is a particle
("pick up", "bring me", "put down"), that one too. It answers in the paper's format (``1: "Yes", 2: [2, 4]``
or ``1: "No"``). With an imperfect understanding (droc_doubles.Understanding) it judges each previous task
wrongly with probability ``noise``: a task of the category left out, or one of another category taken.
"""

from __future__ import annotations

import re

from teachbot.evaluation.droc_doubles import NoisyReader, Understanding
from teachbot.llm.scripted import ScriptedModel

PARTICLES = frozenset({"up", "down", "out", "in", "on", "off", "away", "back", "me", "over"})


def category(task: str) -> str:
    """A task's category: its verb and, when one follows, its particle ("pick up the cup" -> "pick up")."""
    words = re.findall(r"[a-z]+", task.casefold())
    if not words:
        return ""
    return " ".join(words[:2]) if len(words) > 1 and words[1] in PARTICLES else words[0]


class SelectionDouble(ScriptedModel, NoisyReader):
    """The task selection model's stand-in (see the module docstring)."""

    def __init__(self, understanding: Understanding | None = None) -> None:
        super().__init__(respond=self.answer, name="selection:droc-double")
        self.understanding = understanding or Understanding()

    def answer(self, prompt: str) -> str:
        listed = re.findall(r"^Previous tasks: (.*)$", prompt, re.M)
        new = re.findall(r"^New task: (.*)$", prompt, re.M)
        if not listed or not new:
            return '1: "No"'
        tasks = re.findall(r"(\d+)\. (.*?)(?=\s+\d+\. |$)", listed[-1].strip())
        wanted = category(new[-1])
        keep = []
        for number, text in tasks:
            same = category(text) == wanted
            if self.understanding.slips("same category", new[-1], text):
                same = not same
            if same:
                keep.append(int(number))
        return f'1: "Yes", 2: {keep}' if keep else '1: "No"'
