"""The interaction loop: prompt the LLM, run its statement in the sandbox, write the real output.

An episode begins with the console itself running ``wait_for_trigger()`` (``begin``): no LLM call
happens before a person has spoken. The LLM's reply is read tolerantly (teachbot.language.reply:
fences, prose, reasoning preambles, echoed prompts, invented output); its first statement runs (all
of them, in order, with ``run_all_statements``). With a streaming backend the reply is closed as soon
as the first statement is complete.

When the person speaks after the robot acted, an optional correction hook (the DROC correction
handler, teachbot.knowledge.correction) may add a note to the transcript and re-run the corrected skill
call with adjusted parameters, typed by the console itself (not counted as a round).

Stops after ``max_rounds`` statements, after ``max_consecutive_errors`` errors of one kind in a row,
when the model repeats one statement ``loop_repeats`` times in a row with the same result, when a
``wait_for_trigger()`` the model wrote finds nobody there, or when the dialog ends. Undefined
functions are written by the function-generating LLM first and inserted into the transcript before
the statement that calls them; every generated definition that ran is in the transcript with its
output, even one that failed (the sandbox refuses, before running it, a definition whose defaults,
decorators or annotations would run code: teachbot/sandbox/_sandbox_defs.py).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teachbot.console.prompt import PromptBuilder
from teachbot.language.bounds import Bounds, where
from teachbot.language.completion import syntax_error
from teachbot.language.prompts import load_prompt
from teachbot.language.reply import Reply, code_block, first_statement_complete, read_reply
from teachbot.language.transcript import Entry, Transcript, person_outputs, utterance_text
from teachbot.llm.base import Completion, Model
from teachbot.sandbox.executor import CONSOLE_BUILTINS, RunResult, SandboxExecutor
from teachbot.tracing import EPISODE_ID, fail, set_attributes, span

SESSION_END = "SessionEnded"  # error type raised by the dialog when the person leaves
NOBODY = "TimeoutError"  # error type of a wait_for_trigger()/ask() that nobody answered
TRIGGER = "wait_for_trigger()"
QUIET_PREFIX = "nobody spoke"  # stop reasons that need no word to the person


@dataclass(frozen=True)
class SessionConfig:
    max_rounds: int = 50
    max_consecutive_errors: int = 3
    loop_repeats: int = 3
    function_depth: int = 2  # helpers a generated function may in turn have generated
    run_all_statements: bool = False  # run every statement of a reply in order, not only the first
    max_transcript_chars: int = Bounds.max_transcript_chars  # bounds.max_transcript_chars (CoreConfig puts it here)

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> SessionConfig:
        fields = cls.__dataclass_fields__
        return cls(**{k: (bool(v) if fields[k].type in (bool, "bool") else int(v)) for k, v in raw.items() if k in fields})


@dataclass(frozen=True)
class CorrectionStep:
    """What the correction hook adds after the person's words: a note line and a statement to re-run ('' for none)."""

    note: str = ""
    statement: str = ""


CorrectionHook = Callable[[str, Transcript], CorrectionStep | None]


@dataclass
class StepOutcome:
    source: str
    result: RunResult | None
    completion: Completion
    generated: list[str] = field(default_factory=list)  # definitions written for this step
    reply: Reply | None = None  # how the reply was read: the statements and what was dropped


class ConsoleSession:
    """One console episode against a sandbox bound to a robot API."""

    def __init__(
        self,
        executor: SandboxExecutor,
        model: Model,
        prompts: PromptBuilder,
        *,
        function_model: Model | None = None,
        config: SessionConfig | None = None,
        on_entry: Callable[[Entry, int], None] | None = None,
        corrections: CorrectionHook | None = None,
        episode_id: str = "",
    ) -> None:
        self.executor = executor
        self.episode_id = episode_id  # named on each statement span, so a reader finds a running episode's trace
        self.corrections = corrections
        self.model = model
        self.function_model = function_model
        self.prompts = prompts
        self.config = config or SessionConfig()
        self.transcript = Transcript(max_chars=self.config.max_transcript_chars)
        self.on_entry = on_entry or (lambda _entry, _first_line: None)
        self.rounds = 0
        self._lines = 0  # transcript lines so far (as TranscriptUpdate numbers them: first_line of each entry)
        self._code_line = 0  # the first line of the newest code entry
        self.stop_reason = ""
        self._errors: list[str] = []
        self._recent: list[tuple[str, str]] = []
        self._function_template = load_prompt("function_generation.txt")

    # ------------------------------------------------------------------ transcript
    def _code(self, source: str) -> None:
        self.transcript.add_code(source)
        self._code_line = self._lines
        self._entered()

    def _output(self, text: str) -> None:
        if text:
            self.transcript.add_output(text)
            self._entered()

    def _entered(self) -> None:
        entry = self.transcript.entries[-1]
        first_line = self._lines
        self._lines += entry.render().count("\n") + 1
        self.on_entry(entry, first_line)

    # ------------------------------------------------------------------ loop
    def run(self, should_stop: Callable[[], bool] = lambda: False) -> str:
        """``begin``, then step until a stop condition or ``should_stop()`` (checked before each step); returns the reason."""
        if not self.transcript.entries and not self.begin(should_stop):
            return self.stop_reason
        while not self.stop_reason:
            if should_stop():  # the console is closing: no new LLM call, no new statement
                self.stop_reason = "the console was closed"
                break
            self.step()
        return self.stop_reason

    def begin(self, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """The console's own ``wait_for_trigger()``: block until the person speaks, asking no LLM.

        A dialog timeout (nobody there) just waits again, unrecorded; returns False when the person
        left or ``should_stop()`` said so (``stop_reason`` then says why)."""
        self._code(TRIGGER)
        while True:
            result = self._run(TRIGGER)
            if result.error_type == NOBODY and not should_stop():
                continue
            if result.error_type == SESSION_END:
                self.stop_reason = "the person ended the session"
            elif result.error:
                self.stop_reason = f"{QUIET_PREFIX}; stopped waiting" if result.error_type == NOBODY else result.error
            else:
                self._output("\n".join(result.outputs))
                self.stop_reason = self._too_long()
            return not self.stop_reason

    def step(self) -> StepOutcome:
        """One LLM reply: complete, read, (generate missing functions,) execute, record, check stop rules."""
        until = None if self.config.run_all_statements else first_statement_complete
        completion = self.model.generate(self.prompts.build(self.transcript), until=until)
        reply = read_reply(completion.text)
        self.rounds += 1
        if reply.error:
            source = completion.text.strip().split("\n")[0] if completion.text.strip() else ""
            self._code(source)
            self._output(reply.error)
            self._after(source, reply.error, reply.error.split(":")[0])
            return StepOutcome(source, None, completion, reply=reply)
        statements = reply.statements if self.config.run_all_statements else reply.statements[:1]
        outcome = StepOutcome("", None, completion, reply=reply)
        for source in statements:
            outcome.source = source
            outcome.generated += self._generate_missing(source)
            self._code(source)
            result = outcome.result = self._run(source)
            text = "\n".join([*result.outputs, *([result.error] if result.error else [])])
            self._output(text)
            if result.error_type == SESSION_END:
                self.stop_reason = "the person ended the session"
            elif result.error_type == NOBODY and _waits(source):
                self.stop_reason = f"{QUIET_PREFIX}: {result.error}"
            self._after(source, text, result.error_type or "")
            if result.error or self.stop_reason:
                break  # the rest of the reply was written for a world where this worked
            if "wait_for_trigger" in undefined_calls(source, set()) and self._correct():
                break  # the rest of the reply was written before the person spoke
        return outcome

    def _correct(self) -> bool:
        """Run the correction hook on the person's newest words (not their first request); True when it acted."""
        said = person_outputs(self.transcript.entries)
        last = len(self.transcript.entries) - 1
        if self.corrections is None or len(said) < 2 or last not in said:
            return False
        step = self.corrections(utterance_text(self.transcript.entries[last].text), self.transcript)
        if step is None or not (step.note or step.statement):
            return False
        self._output(step.note)
        if step.statement:
            self._code(step.statement)
            result = self._run(step.statement)
            self._output("\n".join([*result.outputs, *([result.error] if result.error else [])]))
            if result.error_type == SESSION_END:
                self.stop_reason = "the person ended the session"
        return True

    def _run(self, source: str) -> RunResult:
        """Execute one statement in the sandbox as a ``statement`` span: its source, its result or error line."""
        with span("statement", {"console.source": source, "console.line": self._code_line,
                                EPISODE_ID: self.episode_id or None}) as current:
            result = self.executor.run(source)
            shown = result.error or "\n".join(result.outputs)
            set_attributes(current, {"console.result": shown, "console.error_type": result.error_type or None,
                                     "console.sandbox_s": result.sandbox_s, "console.killed": result.killed or None})
            if result.error:
                fail(current, result.error)
        return result

    def _after(self, source: str, output: str, error_type: str) -> None:
        self._errors = [*self._errors, error_type][-max(1, self.config.max_consecutive_errors):] if error_type else []
        self._recent = [*self._recent, (source, output)][-self.config.loop_repeats:]
        if self.stop_reason:
            return
        too_long = self._too_long()
        if too_long:
            self.stop_reason = too_long
        elif len(self._errors) >= self.config.max_consecutive_errors and len(set(self._errors[-self.config.max_consecutive_errors:])) == 1:
            self.stop_reason = f"gave up after {self.config.max_consecutive_errors} {error_type} errors in a row"
        elif len(self._recent) == self.config.loop_repeats and len(set(self._recent)) == 1 and "wait_for_trigger" not in source:
            self.stop_reason = f"the model repeated {source.splitlines()[0]!r} {self.config.loop_repeats} times; stopped"
        elif self.rounds >= self.config.max_rounds:
            self.stop_reason = f"reached the limit of {self.config.max_rounds} statements"
        if self.stop_reason:
            self._output(f"# session stopped: {self.stop_reason}")

    def _too_long(self) -> str:
        """The stop reason when the transcript is over its limit even with old outputs elided, else ''."""
        if not self.transcript.over_limit:
            return ""
        return (f"this conversation is longer than {self.config.max_transcript_chars} characters even with old "
                f"outputs elided ({where('max_transcript_chars')})")

    # ------------------------------------------------------------------ function generation
    def _known(self) -> set[str]:
        return set(self.executor.names()) | set(self.prompts.api.names) | CONSOLE_BUILTINS

    def _generate_missing(self, source: str, depth: int = 0) -> list[str]:
        """Write definitions for functions ``source`` calls that nobody defined, depth-first."""
        if self.function_model is None:
            return []
        written: list[str] = []
        for name in sorted(undefined_calls(source, self._known())):
            definition = self._write_function(name, source)
            if definition is None:
                continue
            if depth < self.config.function_depth:
                written += self._generate_missing(definition, depth + 1)
            if self.executor.refusal(definition) is not None:
                continue  # refused before anything ran: left out; the statement will report the NameError
            result = self.executor.run(definition)
            self._code(definition)  # it ran: the transcript shows it and what it printed or raised
            self._output("\n".join([*result.outputs, *([result.error] if result.error else [])]))
            if not result.error:
                written.append(definition)
        return written

    def _write_function(self, name: str, line: str) -> str | None:
        prompt = (
            self._function_template.replace("{api}", self.prompts.api.import_block())
            .replace("{defined}", ", ".join(sorted(self.executor.names())) or "nothing yet")
            .replace("{name}", name)
            .replace("{line}", line.replace("\n", "\n... "))
        )
        model = self.function_model
        if model is None:
            return None
        text = code_block(model.generate(prompt, stop=()).text)
        return extract_definition(text, name)


def _waits(source: str) -> bool:
    """Whether a statement calls wait_for_trigger() or ask()."""
    return any(name in undefined_calls(source, set()) for name in ("wait_for_trigger", "ask"))


def undefined_calls(source: str, known: set[str]) -> set[str]:
    """Names called in ``source`` that are neither known nor defined/assigned within it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    local: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.add(node.name)
            local.update(a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {name for name in called - known - local if not name.startswith("_")}


def extract_definition(text: str, name: str) -> str | None:
    """The ``def name(...)`` block in ``text`` as source, or None when there is none that parses."""
    lines = text.replace("\r\n", "\n").split("\n")
    lines = [line[4:] if line.startswith(("... ", ">>> ")) else line for line in lines]
    start = next((i for i, line in enumerate(lines) if line.startswith(f"def {name}(")), None)
    if start is None:
        return None
    block = [lines[start]]
    for line in lines[start + 1:]:
        if line and not line[0].isspace():
            break
        block.append(line)
    source = "\n".join(block).rstrip()
    return None if syntax_error(source) else source
