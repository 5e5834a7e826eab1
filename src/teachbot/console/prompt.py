"""Prompt construction: base prompt with the generated import block, retrieved examples, transcript.

The static part comes first so that providers' prefix caching applies: base prompt (role, rules and
the robot API; byte-identical for a profile, sent as the system message by chat backends, see
``SYSTEM_END``), then the "What I know" block of distilled knowledge and the examples (both fixed while
the instructions do not change), then the current transcript, ending with ``>>> ``. Each step's prompt
therefore starts with the previous step's prompt until the person says something new. With a
``TokenBudget`` the prompt is trimmed to fit the model's context (teachbot.language.budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from teachbot.language.budget import KEEP_CHARS, SHORTENED, PromptTooLong, TokenBudget, TrimReport
from teachbot.language.prompts import CURRENT_HEADER, EXAMPLE_HEADER, ExampleSource, load_prompt
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import PROMPT, Entry, Transcript, person_outputs
from teachbot.llm.base import SYSTEM_END
from teachbot.taskmemory import TaskMemoryConfig, prompt_block


def tasks_block(api: RobotApi) -> str:
    """The procedural memory of the base prompt: the profile's task specifications (config/task_memory.yaml),
    with how to use the task memory when the API has it (prompts/task_memory_block.txt), else the list alone."""
    specs = TaskMemoryConfig.load().tasks(api.profile)
    if not specs:
        return ""
    template = load_prompt("task_memory_block.txt" if "begin_task" in api.names else "task_list_block.txt")
    return template.replace("{specs}", prompt_block(specs)).strip()


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
