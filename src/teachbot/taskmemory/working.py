"""The working memory: per task, its reminders, its state and the objects it is about.

Two makers, switched by config (``task_memory.working_memory``); each selects a task's objects when it
begins (``select``) and makes its working memory from its run (``__call__``):

- :class:`WorkerLLM`, the multi-task memory paper's worker: an LLM picks the task's objects from the full
  list of objects at the task's place (Prompt 4, prompts/task_memory_select.txt) and extracts the task's
  state from its log entries, each an action and where the task's objects were after it (Prompt 5,
  prompts/task_memory_worker.txt). It sees nothing but those prompts. A failed call or an unreadable answer
  is counted (:class:`WorkerStats`); with ``fallback`` the extractor answers instead (counted too), without
  it the working memory says the state could not be extracted. It also makes the declarative memory the
  coordinator retrieves: the environment state and the task state extracted from the log (the paper's
  Prompt 5 proper, prompts/task_memory_declarative.txt; teachbot.taskmemory.declarative).
- :class:`LogExtractor`, deterministic: the task's goals (teachbot.taskmemory.specs) checked against the
  newest logged world and the pointing logged since the task began -- the judge's own definition of done,
  so it is an oracle: the labelled ablation ``memory-extractor`` of the multi-task benchmark.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teachbot.language.json_reply import read_json
from teachbot.language.prompts import load_prompt
from teachbot.language.reply import strip_reasoning
from teachbot.llm.base import LLMError
from teachbot.taskmemory.declarative import DECLARATIVE_PROMPT, FAILED, DeclarativeMemory, extract, failed, read_answer
from teachbot.taskmemory.log import ACTION, BEGIN, RESUMED, LogRecord
from teachbot.taskmemory.specs import ROBOT, Environment, TaskMemoryConfig, TaskSpec, at_place, steps

ACTIVE, PAUSED, DONE, NOT_STARTED = "active", "paused", "done", "not started"
WORKER_KEYS = ("task_reminders", "task_state", "done", "remaining", "task_relevant_objects")
SELECT_PROMPT = "task_memory_select.txt"  # Prompt 4: the task's objects among those at its place
STATE_PROMPT = "task_memory_worker.txt"  # the working memory's state from the task's log entries


@dataclass(frozen=True)
class WorkingMemory:
    """What the coordinator needs to carry on with a task (its console form: :meth:`to_console`)."""

    task: str
    status: str
    instruction: str = ""
    task_reminders: tuple[str, ...] = ()
    task_state: str = ""
    done: tuple[str, ...] = ()
    remaining: tuple[str, ...] = ()
    task_relevant_objects: Mapping[str, str] = field(default_factory=dict)  # name -> where it is
    source: str = "extractor"  # extractor | worker | worker-failed

    def to_console(self) -> dict[str, Any]:
        """The dict ``retrieve_working_memory()`` returns."""
        return {"task": self.task, "status": self.status, "instruction": self.instruction,
                "task_reminders": list(self.task_reminders), "task_state": self.task_state, "done": list(self.done),
                "remaining": list(self.remaining), "task_relevant_objects": dict(self.task_relevant_objects)}


@dataclass(frozen=True)
class TaskRun:
    """A task's run as the logs hold it: the spec (None for a task no spec names), the records since it
    began afresh, and whether it is the task the robot works on now. A task not started yet is a run of
    one begin record that is not in the log (``started`` False): the objects selected for it and the world now."""

    task: str
    spec: TaskSpec | None
    records: Sequence[LogRecord]
    current: bool
    started: bool = True

    @property
    def instruction(self) -> str:
        first = next((r for r in self.records if r.kind == "begin"), None)
        return first.instruction.removeprefix(RESUMED) if first else ""

    @property
    def relevant(self) -> tuple[str, ...]:
        first = next((r for r in self.records if r.kind == "begin"), None)
        return first.relevant if first else ()

    @property
    def environment(self) -> Environment:
        return self.records[-1].environment if self.records else {}

    @property
    def pointed(self) -> list[str]:
        return [str(r.args[0]) for r in self.records if r.kind == ACTION and r.function == "point_at" and r.ok and r.args]

    @property
    def actions(self) -> list[LogRecord]:
        return [r for r in self.records if r.kind == ACTION]


class LogExtractor:
    """The deterministic working memory of a task run."""

    def __init__(self, config: TaskMemoryConfig) -> None:
        self.config = config
        self.category_of = config.category_of

    def select(self, task: str, spec: TaskSpec | None, instruction: str, environment: Environment) -> tuple[str, ...]:
        """The task's objects by its goals (the judge's own selection; none for a task without a spec)."""
        return tuple(spec.relevant(environment, self.category_of)) if spec else ()

    def __call__(self, run: TaskRun) -> WorkingMemory:
        env = run.environment
        objects = {n: env[n].at for n in run.relevant if n in env}
        if run.spec is None:  # no goals to check: what was done, and the objects the actions named
            done = tuple(f"{r.call_text()} -> {r.result}" for r in run.actions if r.ok)
            named = {str(a) for r in run.actions for a in r.args if isinstance(a, str) and a in env}
            state = f"{len(done)} action{'s' if len(done) != 1 else ''} done; no specification says what is left"
            return WorkingMemory(run.task, ACTIVE if run.current else PAUSED, run.instruction, (), state, done, (),
                                 {n: env[n].at for n in sorted(named)})
        all_steps = steps(run.spec, run.relevant, env, run.pointed, self.category_of)
        done = tuple(s.text for s in all_steps if s.done)
        remaining = tuple(s.text for s in all_steps if not s.done)
        status = DONE if all_steps and not remaining else ACTIVE if run.current else PAUSED
        if not run.started:
            status = NOT_STARTED
        state = f"{len(done)} of {len(all_steps)} steps done" + (f"; next: {remaining[0]}" if remaining else "")
        reminders = tuple(run.spec.reminders) or (run.spec.description,)
        held = [n for n, info in env.items() if info.at == ROBOT and n not in run.relevant]
        if held and status != DONE:  # switched halfway: the hand still holds what another task was moving
            reminders = (f"The robot holds the {held[0]}, which this task is not about: put it back first.", *reminders)
        return WorkingMemory(run.task, status, run.instruction, reminders, state, done, remaining, objects)

    def declarative(self, run: TaskRun, limit: int) -> DeclarativeMemory:
        """The run's declarative memory read from its newest logged world (with its newest ``limit`` actions)."""
        return extract(run, limit)


@dataclass
class WorkerStats:
    """What a worker did: its model calls, the calls that failed or gave an unusable answer, the times the
    extractor answered instead, and why each failure happened (newest last)."""

    calls: int = 0
    failures: int = 0
    fallbacks: int = 0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "failures": self.failures, "fallbacks": self.fallbacks, "problems": list(self.problems)}


class WorkerLLM:
    """The worker LLM of the multi-task memory paper (see the module's docstring).

    ``template``: the state prompt (Prompt 5; prompts/task_memory_worker.txt); ``select_template``: the
    selection prompt (Prompt 4; default prompts/task_memory_select.txt). ``fallback``: let the extractor
    answer when the worker fails (each time counted in ``stats``); without it a failed selection keeps every
    object at the task's place and a failed extraction says so in the working memory."""

    def __init__(self, model: Any, template: str, config: TaskMemoryConfig, log: Callable[[str], None] = lambda _l: None,
                 select_template: str | None = None, fallback: bool = True, declarative_template: str | None = None) -> None:
        self.model, self.template, self.config, self.log = model, template, config, log
        self.select_template = select_template if select_template is not None else load_prompt(SELECT_PROMPT)
        self.declarative_template = (declarative_template if declarative_template is not None
                                     else load_prompt(DECLARATIVE_PROMPT))
        self.fallback = fallback
        self.extractor = LogExtractor(config)
        self.stats = WorkerStats()

    # ------------------------------------------------------------------ Prompt 4: the task's objects
    def select_prompt(self, task: str, spec: TaskSpec | None, instruction: str, names: Sequence[str]) -> str:
        return _fill(self.select_template, {
            "{task}": task, "{description}": spec.description if spec else instruction or task,
            "{reminders}": "\n".join(spec.reminders) if spec else "", "{objects}": ", ".join(names) or "(none)"})

    def select(self, task: str, spec: TaskSpec | None, instruction: str, environment: Environment) -> tuple[str, ...]:
        """The objects the worker names as the task's, among those at the task's place, in its order. An
        answer naming other objects is a failure: the extractor selects instead with ``fallback``, else the
        named objects that are there are kept (every object at the place when the answer names none)."""
        names = [n for n in environment if spec is None or not spec.place or at_place(n, environment, spec.place)]
        raw = self._ask(self.select_prompt(task, spec, instruction, names))
        chosen, unknown = (None, []) if raw is None else _names(raw, names)
        if chosen is not None and not unknown:
            return tuple(chosen)
        if raw is not None:
            self._failed(f"the selection named objects that are not at the task's place: {unknown}" if unknown
                         else "the selection held no object names")
        if self.fallback:
            self.stats.fallbacks += 1
            return self.extractor.select(task, spec, instruction, environment)
        return tuple(chosen) if chosen else tuple(names)

    # ------------------------------------------------------------------ Prompt 5: the task's state
    def prompt(self, run: TaskRun) -> str:
        spec = run.spec
        return _fill(self.template, {
            "{task}": run.task, "{specification}": spec.description if spec else run.instruction,
            "{reminders}": "\n".join(f"- {r}" for r in (spec.reminders if spec else ())) or "(none)",
            "{instruction}": run.instruction or "(none)", "{objects}": ", ".join(run.relevant) or "(none)",
            "{log}": log_entries(run, self.config.worker_log_lines)})

    def __call__(self, run: TaskRun) -> WorkingMemory:
        raw = self._ask(self.prompt(run))
        if raw is None:
            return self._instead(run, "the worker model failed")
        answer = read_json(raw, WORKER_KEYS)
        if answer is None:
            self._failed("the state answer held no JSON object")
            return self._instead(run, "the worker's answer held no JSON object")
        try:
            return _from_answer(run, answer)
        except (TypeError, ValueError) as exc:
            self._failed(f"the state answer is not usable: {exc}")
            return self._instead(run, f"the worker's answer is not usable ({exc})")

    # ------------------------------------------------------------------ Prompt 5: the declarative memory
    def declarative_prompt(self, run: TaskRun) -> str:
        """The declarative prompt (prompts/task_memory_declarative.txt) filled from the run's log."""
        spec = run.spec
        return _fill(self.declarative_template, {
            "{task}": run.task, "{specification}": spec.description if spec else run.instruction or run.task,
            "{objects}": ", ".join(run.relevant) or "(none)", "{place}": (spec.place if spec else "") or "place it began at",
            "{log}": log_entries(run, self.config.worker_log_lines)})

    def declarative(self, run: TaskRun, limit: int) -> DeclarativeMemory:
        """The environment state and the task state the worker extracts from the run's log, with its newest
        ``limit`` actions. A failure is counted; the answer says it (with ``fallback`` the extractor's
        state, labelled so, else none)."""
        raw = self._ask(self.declarative_prompt(run))
        why = "the worker model failed"
        if raw is not None:
            try:
                return read_answer(raw, run, limit)
            except (TypeError, ValueError) as exc:
                self._failed(f"the declarative answer is not usable: {exc}")
                why = f"the worker's answer is not usable ({exc})"
        if self.fallback:
            self.stats.fallbacks += 1
            return dataclasses.replace(extract(run, limit), problem=f"{why}; the deterministic extractor answered instead")
        return failed(run, limit, why)

    # ------------------------------------------------------------------ failures
    def _ask(self, prompt: str) -> str | None:
        self.stats.calls += 1
        try:
            return self.model.generate(prompt, stop=(), temperature=self.config.worker_temperature).text
        except (LLMError, OSError) as exc:
            self._failed(f"the model failed: {exc}")
            return None

    def _failed(self, why: str) -> None:
        self.stats.failures += 1
        self.stats.problems.append(why)
        self.log(f"task memory: {why}" + ("; the extractor answers instead" if self.fallback else ""))

    def _instead(self, run: TaskRun, why: str) -> WorkingMemory:
        if self.fallback:
            self.stats.fallbacks += 1
            return self.extractor(run)
        env = run.environment
        status = NOT_STARTED if not run.started else ACTIVE if run.current else PAUSED
        return WorkingMemory(run.task, status, run.instruction, tuple(run.spec.reminders) if run.spec else (),
                             f"unknown: {why}; read retrieve_declarative_memory({run.task!r})", (), (),
                             {n: env[n].at for n in run.relevant if n in env}, source=FAILED)


def log_entries(run: TaskRun, limit: int) -> str:
    """A run's log as the worker reads it (Prompt 5): per action, the call and its result, then where the
    task's objects were after it, grouped by place; a begin says only that the task began or resumed."""
    lines: list[str] = []
    actions = 0
    kept = {id(r) for r in run.actions[-limit:]} if limit > 0 else {id(r) for r in run.actions}
    for record in run.records:
        if record.kind == BEGIN:
            if run.started:
                lines.append("Task resumed." if record.instruction.startswith(RESUMED) else f"Task begun: {record.instruction or run.task}")
            continue
        actions += 1
        if id(record) not in kept:
            continue
        lines.append(f"Log entry {actions}:")
        lines.append(f"Action: {record.call_text()} -> {record.result if record.ok else 'failed: ' + record.result}")
        where: dict[str, list[str]] = {}
        for name in run.relevant:
            if name in record.environment:
                where.setdefault(record.environment[name].at, []).append(name)
        lines += [f"{at}: {', '.join(names)}" for at, names in where.items()]
    return "\n".join(lines) if actions else "\n".join([*lines, "(no log entries: nothing done yet)"])


def _fill(template: str, fields: Mapping[str, str]) -> str:
    for key, value in fields.items():
        template = template.replace(key, value)
    return template


def _names(raw: str, names: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """The object names of a comma-separated answer (numbering, quotes, a final stop tolerated; a name
    matched without case, or a near spelling), and the words that name none of ``names``."""
    text = strip_reasoning(raw).strip().strip("`").strip()
    by_lower = {n.lower(): n for n in names}
    chosen: list[str] = []
    unknown: list[str] = []
    for part in re.split(r"[,;\n]", text):
        item = re.sub(r"^\s*(?:\d+[.)]|[-*])\s*", "", part).strip().strip("'\"").rstrip(".").strip().lower()
        item = re.sub(r"^the ", "", item)
        if not item or item in ("none", "nothing"):
            continue
        match = by_lower.get(item) or next(iter(by_lower[m] for m in difflib.get_close_matches(item, list(by_lower), 1, 0.85)), None)
        if match is None:
            unknown.append(item)
        elif match not in chosen:
            chosen.append(match)
    return (chosen if chosen or not unknown else None), unknown


def _from_answer(run: TaskRun, answer: Mapping[str, Any]) -> WorkingMemory:
    def strings(key: str) -> tuple[str, ...]:
        value = answer.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{key} must be a list of sentences")
        return tuple(str(v).strip() for v in value if str(v).strip())

    objects = answer.get("task_relevant_objects", {})
    if isinstance(objects, (list, tuple)):
        objects = {str(n): "" for n in objects}
    if not isinstance(objects, Mapping):
        raise TypeError("task_relevant_objects must map object names to where they are")
    known = set(run.environment)
    made_up = sorted(str(n) for n in objects if str(n) not in known)
    if made_up:
        raise ValueError(f"objects that are not in the world: {made_up}")
    remaining, done = strings("remaining"), strings("done")
    status = NOT_STARTED if not run.started else DONE if done and not remaining else ACTIVE if run.current else PAUSED
    reminders = strings("task_reminders") or (tuple(run.spec.reminders) if run.spec else ())
    return WorkingMemory(run.task, status, run.instruction, reminders, str(answer.get("task_state", "")).strip(), done,
                         remaining, {str(k): str(v) for k, v in objects.items()}, source="worker")


def declarative_view(records: Sequence[LogRecord], relevant: Sequence[str], limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` actions of a task as ``retrieve_declarative_memory()`` returns them: the call,
    its result and where the task's objects were after it."""
    actions = [r for r in records if r.kind == ACTION]
    first = max(len(actions) - limit, 0)
    out = []
    for index, record in enumerate(actions[first:], start=first + 1):
        env = record.environment
        names = [n for n in relevant if n in env] or sorted(env)
        out.append({"step": index, "action": record.call_text(), "result": record.result,
                    "after": {n: env[n].at for n in names}})
    return out


def dumps(memory: WorkingMemory) -> str:
    """The working memory as one JSON line (the memory node's service answer)."""
    return json.dumps({**memory.to_console(), "source": memory.source})
