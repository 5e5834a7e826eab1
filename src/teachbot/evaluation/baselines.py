"""The baselines of the evaluation, behind the same agent interface as the console (``run``, ``close``).

- ``cap`` (Code as Policies): the whole program at once from a few-shot prompt (prompts/cap_tabletop.txt),
  run in the sandbox as one snippet, with no console feedback. An exception ends the run. Otherwise the
  end of the program is a return of control: the task's check decides, the simulated person reacts, and
  a correction is the next ``# ...`` line of the prompt (earlier instructions and programs kept) for a
  new whole program.
- ``dynamic-cap``: cap plus the ``k`` stored (instruction, program) examples most similar to the
  instructions, from the method's own store (the shared seed transcripts as well, read as programs);
  a successful run is stored as console text, so retrieval keys on its instructions.
- ``helper`` (HELPER-style): stores and retrieves as dynamic-cap; a program that raises goes to a
  self-reflection prompt (prompts/helper_reflect.txt) up to ``REFLECTIONS`` times before control
  returns; the person's feedback, after an error too, is a new command.

``PlanProgramModel`` is the stand-in program writer that proves these mechanics offline (not any model).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.console.tabletop_api import TabletopRobot
from teachbot.errors import TeachbotError
from teachbot.evaluation.harness import UNBOUND, AgentModels, EvalDialog, Method, PreparedRun, run_record, usage_meter
from teachbot.evaluation.metrics import Return, RunRecord
from teachbot.evaluation.person import LlmPerson, PersonConfig, TemplatePerson
from teachbot.language.prompts import load_prompt
from teachbot.language.registry import RobotApi
from teachbot.language.reply import read_reply
from teachbot.language.transcript import Transcript, person_outputs, utterance_text
from teachbot.llm.base import SYSTEM_END
from teachbot.llm.scripted import ScriptedModel
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import InteractionExample
from teachbot.memory.records import read_seeds
from teachbot.sandbox.executor import RunResult, SandboxExecutor, SandboxLimits

KINDS = ("cap", "dynamic-cap", "helper")
PROFILE = "tabletop"
CAP_PROMPT, REFLECT_PROMPT = "cap_tabletop.txt", "helper_reflect.txt"
REFLECTIONS = 2  # helper's self-reflections on a program that raised, before control returns
CONSOLE_ONLY = ("wait_for_trigger", "learn_from_interaction")  # calls that mean nothing inside a program
Program = tuple[str, ...]  # top-level statements as source


class ProgramEnd(Exception):
    """``wait_for_trigger()`` inside a program: the program hands control back (not an error)."""


def read_program(text: str) -> Program:
    """The program in a model's reply: think blocks, fences and prose dropped (the console's reply reader).

    An unfenced reply is cut where a blank line is followed by a ``# `` line: a completion model going on
    with the next example. An unreadable reply is the empty program.
    """
    if not re.search(r"^\s*(```|~~~)", text, re.M):
        text = re.split(r"\n[ \t]*\n# ", text, maxsplit=1)[0]
    return read_reply(text).statements


def one_line(text: str) -> str:
    return " ".join(text.split())


def _console_only(source: str) -> bool:
    """A console-only call, or a bare expression without a call at its top (the console's inspection)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and not isinstance(tree.body[0].value, ast.Call):
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in CONSOLE_ONLY
               for n in ast.walk(tree))


OBJECT_NAME = re.compile(r"\b[a-z]+ (?:block|bowl)\b")


def cap_example(transcript: str) -> str:
    """A console transcript as a CaP example: first ``objects = [...]`` (a ``get_obj_names()`` output where the
    transcript shows one, else every object it names), then the person's words as ``# ...`` lines and the code
    between them (console-only calls, inspections and outputs dropped)."""
    parsed = Transcript.parse(transcript)
    said = person_outputs(parsed.entries)
    objects: list[str] | None = None
    lines: list[str] = []
    for i, entry in enumerate(parsed.entries):
        after = parsed.entries[i + 1] if i + 1 < len(parsed.entries) else None
        if i in said:
            lines.append(f"# {one_line(utterance_text(entry.text))}")
        elif entry.kind == "code" and entry.text.strip() == "get_obj_names()" and after is not None and after.kind == "output":
            try:
                objects = [str(name) for name in ast.literal_eval(after.text.strip())]
            except (ValueError, SyntaxError):
                continue
        elif entry.kind == "code" and not _console_only(entry.text):
            lines.append(entry.text)
    if objects is None:  # the objects the example names, as far as it shows them
        objects = sorted(set(OBJECT_NAME.findall("\n".join(e.text for e in parsed.entries))))
    return "\n".join([f"objects = {objects!r}", *lines]) if lines else ""


def run_transcript(objects: Sequence[str], turns: Sequence[tuple[str, Program]]) -> str:
    """Console text of a run as stored: the object names, then each instruction and the program that answered it."""
    transcript = Transcript()
    transcript.add_code("get_obj_names()")
    transcript.add_output(repr(list(objects)))
    for said, program in turns:
        transcript.add_code("wait_for_trigger()")
        transcript.add_output(repr({"type": "dialog", "text": said}))
        for statement in program:
            transcript.add_code(statement)
    transcript.add_code("wait_for_trigger()")
    return transcript.render()


def seed_programs(memory_config: Any = None) -> list[str]:
    """The tabletop seed examples (``seeds_dir`` of config/memory.yaml, or of ``memory_config``) as CaP programs, in
    file order: the few-shot examples of cap, the same knowledge the console's seeds hold."""
    settings = memory_config or MemoryConfig.load()
    seeds = read_seeds(settings.seeds_dir, settings.learned_dir)
    texts = (cap_example(e.transcript) for e in sorted(seeds.values(), key=lambda e: e.id) if e.profile == PROFILE)
    return [text for text in texts if text]


class CapPrompt:
    """The CaP prompt: the static part (rules, API, few-shot examples) as the system part, then any
    retrieved examples (most similar last) and the current task, ending with its newest ``# ...`` line."""

    def __init__(self, api: RobotApi, examples: Sequence[str] = ()) -> None:
        """``examples``: the few-shot examples of the static part (cap: the seeds as programs, :func:`seed_programs`)."""
        self.static = (load_prompt(CAP_PROMPT).replace("{api}", api.import_block())
                       .replace("{examples}", "\n\n".join(examples) if examples else "(none here: similar ones follow)")
                       .rstrip("\n"))

    def build(self, objects: Sequence[str], turns: Sequence[tuple[str, Program]], command: str,
              examples: Sequence[str] = ()) -> str:
        current = [f"objects = {list(objects)!r}"]
        for said, program in turns:
            current += [f"# {one_line(said)}", *program]
        current.append(f"# {one_line(command)}")
        return self.static + SYSTEM_END + "\n\n".join([*examples, "\n".join(current)]) + "\n"


@dataclasses.dataclass
class _Attempt:
    program: Program
    result: RunResult


class BaselineAgent:
    """One baseline method's runs: its program writer, the sandbox over the tabletop API, its own store."""

    def __init__(self, method: Method, store: Path, models: AgentModels, skills: Any, objects: Callable[[], dict],
                 *, person: PersonConfig, seed: int, run_timeout: float = 300.0, memory_config: Any = None,
                 embedder: Any = None, limits: SandboxLimits | None = None, deviations: Sequence[str] = ()) -> None:
        """``deviations``: names of teachbot.evaluation.sweep.DEVIATIONS to apply (a baseline knows wall-clock-timeout;
        cap ends a run on an error as the paper does, helper reflects on it by design)."""
        if method.kind not in KINDS:
            raise ValueError(f"{method.name}: a baseline's kind is one of {', '.join(KINDS)}, got {method.kind!r}")
        self.method, self.models, self.objects, self.run_timeout = method, models, objects, run_timeout
        self.usage = usage_meter(models)
        self.memory = None
        if method.kind != "cap":

            settings = dataclasses.replace(memory_config or MemoryConfig.load(), learned_dir=Path(store).resolve())
            self.memory = EpisodicMemory.open(settings, embedder=embedder)
        rng = np.random.default_rng(seed)
        who = LlmPerson(person, models.person, rng) if person.kind == "llm" and models.person else TemplatePerson(person, rng)
        wall = "wall-clock-timeout" in deviations
        self.dialog = EvalDialog(who, run_timeout, clock=None if wall else (lambda: self.sandbox.robot_seconds))
        self.api = RobotApi.load(PROFILE).without(UNBOUND)
        functions = TabletopRobot(skills, objects, self.dialog).functions()
        functions["wait_for_trigger"] = self._end_program
        functions["learn_from_interaction"] = lambda: None  # a baseline learns by storing successful runs
        self.sandbox = SandboxExecutor(self.api.bind(functions), limits or SandboxLimits(),
                                       on_kill=getattr(skills, "cancel_all", None), robot_functions=self.api.motion_names)
        # equal priors: cap holds every seed in its prompt; dynamic-cap and helper retrieve the k most similar of them
        self.prompt = CapPrompt(self.api, seed_programs(memory_config) if self.memory is None else ())
        self.reflect_template = load_prompt(REFLECT_PROMPT).replace("{api}", self.api.import_block())
        self.log = Transcript()

    @staticmethod
    def _end_program() -> dict:
        raise ProgramEnd("the program handed control back")

    def run(self, prepared: PreparedRun) -> RunRecord:
        """Whole programs until the person ends the run (cap and dynamic-cap: an exception ends it too)."""
        self.dialog.start(prepared)
        self.usage.reset()
        self.log = Transcript()
        self.sandbox.reset()
        self.sandbox.new_episode()  # each run has the robot time of one episode
        started = time.monotonic()
        names = sorted(self.objects())
        self.sandbox.run(f"objects = {names!r}")
        self.log.add_code("get_obj_names()")
        self.log.add_output(repr(names))
        turns: list[tuple[str, Program]] = []
        command, success = prepared.instruction, False
        while True:
            self.log.add_code("wait_for_trigger()")
            self.log.add_output(repr({"type": "dialog", "text": command}))
            attempt, state = self._attempt(names, turns, command)
            turns.append((command, attempt.program))
            if state is None and self.dialog.elapsed > self.run_timeout:
                state = "timeout"
            if state == "error" and self.method.kind != "helper":
                self.dialog.returns.append(Return("error"))  # no console feedback: the run ends here
                break
            reaction = self.dialog.react(state)
            success = self.dialog.returns[-1].state == "success"
            if reaction.ends_run:
                break
            command = reaction.utterance or prepared.instruction
        if success and self.memory is not None:
            self.memory.add(InteractionExample(
                profile=PROFILE, source="learned", transcript=run_transcript(names, turns),
                instructions=tuple(said for said, _ in turns), episode_id=_episode_id(prepared),
                author_model=getattr(self.models.interaction, "name", "")))
        self.log.add_code("wait_for_trigger()")
        return run_record(prepared, self.dialog.returns, self.usage, started, self.log.render())

    def _attempt(self, names: list[str], turns: list[tuple[str, Program]], command: str) -> tuple[_Attempt, str | None]:
        """A whole program for ``command`` and its run (helper: reflected on while it raises); the state
        it leaves: None (ended normally: the check decides), 'error' or 'timeout'."""
        examples = self._examples([*(said for said, _ in turns), command])
        reply = self._write(self.prompt.build(names, turns, command, examples))
        if reply is None:
            return _Attempt((), RunResult()), "error"
        attempt = self._execute(read_program(reply))
        for _ in range(REFLECTIONS if self.method.kind == "helper" else 0):
            if _state(attempt.result) != "error" or self.dialog.elapsed > self.run_timeout:
                break
            instructions = "\n".join(f"# {one_line(said)}" for said in [*(s for s, _ in turns), command])
            prompt = (self.reflect_template.replace("{objects}", repr(names)).replace("{instructions}", instructions)
                      .replace("{program}", "\n".join(attempt.program) or "(empty)")
                      .replace("{error}", attempt.result.error or ""))
            reply = self._write(prompt)
            if reply is None:
                break
            attempt = self._execute(read_program(reply))
        return attempt, _state(attempt.result)

    def _examples(self, instructions: list[str]) -> list[str]:
        """dynamic-cap and helper: the ``k`` most similar stored runs as CaP examples, most similar last."""
        if self.memory is None or self.method.k <= 0:
            return []
        found = self.memory.retrieve(list(reversed(instructions)), PROFILE, self.method.k)
        return [text for text in (cap_example(r.example.transcript) for r in found) if text.strip()]

    def _write(self, prompt: str) -> str | None:
        """The program writer's reply, or None when the model failed (recorded in the run's transcript)."""

        try:
            return self.models.interaction.generate(prompt, stop=()).text
        except TeachbotError as exc:
            self.log.add_output(f"LLMError: {exc}")
            return None

    def _execute(self, program: Program) -> _Attempt:
        source = "\n".join(program)
        self.log.add_code(source or "pass")
        result = self.sandbox.run(source)
        self.log.add_output("\n".join([*result.outputs, *([result.error] if result.error else [])]))
        return _Attempt(program, result)

    def close(self) -> None:
        self.sandbox.close()


def _state(result: RunResult) -> str | None:
    if result.error is None or result.error_type == ProgramEnd.__name__ or (result.error or "").startswith(ProgramEnd.__name__):
        return None
    return "timeout" if result.error_type == "Timeout" else "error"


def _episode_id(prepared: PreparedRun) -> str:
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", f"{prepared.method}:{prepared.split}:{prepared.template}:{prepared.run}")


def make_baseline(method: Method, store: Path, models: AgentModels, client: Any, objects: Callable[[], dict],
                  **options: Any) -> BaselineAgent:
    """The agent of a baseline method (teachbot.nodes.eval_sweep.make_agent calls this)."""
    return BaselineAgent(method, store, models, client, objects, **options)


class PlanProgramModel(ScriptedModel):
    """Stand-in program writer told the run's expert plan (``begin_run``); it reads the prompt it is given.

    To the CaP prompt it answers with the plan as one fenced program, or, with ``raises``, with a program
    that raises before acting. With ``needs_example`` it writes the plan to a first instruction only when
    the prompt holds an example whose first instruction is like the current one (else it only talks, and
    a correction gets the plan). To a reflection prompt it answers with the plan when the prompt shows
    the error and the failed program. It proves the harness, not any model.
    """

    FAIL = "get_obj_pos('the moon')"

    def __init__(self, *, raises: bool = False, needs_example: bool = False, threshold: float = 0.6) -> None:
        super().__init__(respond=self.answer, name="interaction:plan-program", stop=())
        self.raises, self.needs_example, self.threshold = raises, needs_example, threshold
        self.plan: list[str] = []

    def begin_run(self, plan: Sequence[str]) -> None:
        self.plan = list(plan)

    def fenced(self, lines: Sequence[str]) -> str:
        return "Here is the program:\n```python\n" + "\n".join(lines) + "\n```"

    def answer(self, prompt: str) -> str:
        if "raised an error when it ran" in prompt:
            shown = f"The program:\n{self.FAIL}" in prompt and "ValueError: unknown object 'the moon'" in prompt
            return self.fenced(self.plan) if shown else "say('I do not see what went wrong.')"
        system, user = prompt.split(SYSTEM_END, 1)
        blocks = user.strip().split("\n\n")
        current = [line[2:] for line in blocks[-1].splitlines() if line.startswith("# ")]
        if self.raises:
            return self.fenced([self.FAIL, *self.plan])
        if self.needs_example and len(current) == 1 and not self._has_example(blocks[:-1], current[0]):
            return "say('I do not know how to do that.')"
        return self.fenced(self.plan)

    def _has_example(self, examples: Sequence[str], command: str) -> bool:
        words = command.lower().split()
        for example in examples:
            first = next((line[2:] for line in example.splitlines() if line.startswith("# ")), "")
            if difflib.SequenceMatcher(a=first.lower().split(), b=words).ratio() >= self.threshold:
                return True
        return False
