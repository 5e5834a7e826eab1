"""Prompt construction: base prompt with the generated import block, retrieved examples, transcript.

The static part comes first so that providers' prefix caching applies: base prompt (role, rules and
the robot API; byte-identical for a profile, sent as the system message by chat backends, see
``SYSTEM_END``), then the "What I know" block of distilled knowledge and the examples (both fixed while
the instructions do not change), then the current transcript, ending with ``>>> ``. Each step's prompt
therefore starts with the previous step's prompt until the person says something new. With a
``TokenBudget`` the prompt is trimmed to fit the model's context (teachbot.console.budget).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from teachbot.console.budget import KEEP_CHARS, SHORTENED, PromptTooLong, TokenBudget, TrimReport
from teachbot.console.registry import RobotApi
from teachbot.console.transcript import PROMPT, Entry, Transcript, person_outputs
from teachbot.errors import ConfigError
from teachbot.llm.base import SYSTEM_END
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


def tasks_block(api: RobotApi) -> str:
    """The procedural memory of the base prompt: the profile's task specifications (config/task_memory.yaml),
    with how to use the task memory when the API has it (prompts/task_memory_block.txt), else the list alone."""
    from teachbot.taskmemory import TaskMemoryConfig, prompt_block

    specs = TaskMemoryConfig.load().tasks(api.profile)
    if not specs:
        return ""
    template = load_prompt("task_memory_block.txt" if "begin_task" in api.names else "task_list_block.txt")
    return template.replace("{specs}", prompt_block(specs)).strip()


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
    budget: TokenBudget | None = None
    last_trim: TrimReport = field(default_factory=TrimReport)  # what the newest build() trimmed
    knowledge: Callable[[list[str]], str] | None = None  # instructions -> the "What I know" block ('' for none)
    last_block: str = ""  # the block the newest build() showed
    tasks: str | None = None  # the task specifications' block of the base prompt (None: not read yet)

    @classmethod
    def for_profile(
        cls, api: RobotApi, examples: ExampleSource | None = None, k: int = 16, budget: TokenBudget | None = None,
        knowledge: Callable[[list[str]], str] | None = None,
    ) -> PromptBuilder:
        return cls(api, load_prompt(f"console_{api.profile}.txt"), examples, k, budget, knowledge=knowledge)

    def base(self) -> str:
        """The static part: role, rules, the robot API and the tasks it knows (the chat backends' system message)."""
        text = self.base_template.replace("{api}", self.api.import_block())
        if "{tasks}" in text:
            if self.tasks is None:  # read once: the base prompt stays the same from step to step
                self.tasks = tasks_block(self.api)
            text = text.replace("{tasks}", self.tasks)
        return text.rstrip() + "\n"

    def build(self, transcript: Transcript) -> str:
        """The prompt for the next statement, trimmed to the budget (raises PromptTooLong if it cannot fit)."""
        examples: list[str] = []
        instructions = transcript.instructions()
        if self.examples is not None and self.k > 0:
            examples = self.examples.examples(self.api.profile, instructions, self.k)
        self.last_block = self.knowledge(instructions).strip() if self.knowledge is not None else ""
        entries = list(transcript.entries)
        prompt = self._render(examples, entries)
        self.last_trim = TrimReport()
        if self.budget is None or self.budget.fits(prompt):
            return prompt
        report = TrimReport(tokens_before=self.budget.estimate(prompt))
        while examples and not self.budget.fits(prompt):  # least similar first: they come first
            examples = examples[1:]
            report.dropped_examples += 1
            prompt = self._render(examples, entries)
        protected = person_outputs(entries)
        last_output = max((i for i, e in enumerate(entries) if e.kind == "output"), default=-1)
        for index, entry in enumerate(entries):  # then the oldest outputs, never the person's words
            if self.budget.fits(prompt):
                break
            if entry.kind != "output" or index in protected or index == last_output or len(entry.text) <= KEEP_CHARS:
                continue
            entries[index] = Entry("output", entry.text[:KEEP_CHARS].split("\n")[0] + SHORTENED)
            report.shortened_outputs += 1
            prompt = self._render(examples, entries)
        report.tokens_after = self.budget.estimate(prompt)
        self.last_trim = report
        if not self.budget.fits(prompt):
            raise PromptTooLong(
                f"the prompt needs ~{report.tokens_after} tokens even without examples and with old outputs shortened, "
                f"but the model's context leaves {self.budget.limit}; raise llm context_tokens in config/interaction.yaml "
                "or start a new conversation"
            )
        return prompt

    def _render(self, examples: list[str], entries: list[Entry]) -> str:
        parts = [self.base(), SYSTEM_END]
        if self.last_block:  # distilled knowledge: short, kept when examples are trimmed
            parts.append(f"\n{self.last_block}\n")
        parts += [f"\n{EXAMPLE_HEADER}\n{text.rstrip()}\n" for text in examples]
        parts.append(f"\n{CURRENT_HEADER}\n")
        rendered = Transcript(entries).render()
        return "".join(parts) + (rendered + "\n" if rendered else "") + PROMPT
