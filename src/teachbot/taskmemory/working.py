"""The working memory: per task, its reminders, its state and the objects it is about.

Two makers, switched by config (``task_memory.working_memory``):

- :class:`LogExtractor`, deterministic: the task's goals (teachbot.taskmemory.specs) checked against the
  newest logged world and the pointing logged since the task began. It is the ablation's oracle, and the
  fallback of the worker.
- :class:`WorkerLLM`, the multi-task memory paper's worker: an LLM reads the task's specification, its
  objects and its log (prompts/task_memory_worker.txt) and answers one JSON object with the same fields.
  An answer that cannot be read, or that names objects the task is not about, falls back to the extractor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teachbot.language.json_reply import read_json
from teachbot.llm.base import LLMError
from teachbot.taskmemory.log import ACTION, RESUMED, LogRecord
from teachbot.taskmemory.specs import ROBOT, Environment, TaskMemoryConfig, TaskSpec, steps

ACTIVE, PAUSED, DONE, NOT_STARTED = "active", "paused", "done", "not started"
WORKER_KEYS = ("task_reminders", "task_state", "done", "remaining", "task_relevant_objects")


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
    source: str = "extractor"  # extractor | worker

    def to_console(self) -> dict[str, Any]:
        """The dict ``retrieve_working_memory()`` returns."""
        return {"task": self.task, "status": self.status, "instruction": self.instruction,
                "task_reminders": list(self.task_reminders), "task_state": self.task_state, "done": list(self.done),
                "remaining": list(self.remaining), "task_relevant_objects": dict(self.task_relevant_objects)}


@dataclass(frozen=True)
class TaskRun:
    """A task's run as the logs hold it: the spec (None for a task no spec names), the records since it
    began afresh, and whether it is the task the robot works on now."""

    task: str
    spec: TaskSpec | None
    records: Sequence[LogRecord]
    current: bool

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
        if not run.records:
            status = NOT_STARTED
        state = f"{len(done)} of {len(all_steps)} steps done" + (f"; next: {remaining[0]}" if remaining else "")
        reminders = tuple(run.spec.reminders) or (run.spec.description,)
        held = [n for n, info in env.items() if info.at == ROBOT and n not in run.relevant]
        if held and status != DONE:  # switched halfway: the hand still holds what another task was moving
            reminders = (f"The robot holds the {held[0]}, which this task is not about: put it back first.", *reminders)
        return WorkingMemory(run.task, status, run.instruction, reminders, state, done, remaining, objects)


class WorkerLLM:
    """The worker LLM of the multi-task memory paper, with the extractor as its fallback."""

    def __init__(self, model: Any, template: str, config: TaskMemoryConfig, log: Callable[[str], None] = lambda _l: None) -> None:
        self.model, self.template, self.config, self.log = model, template, config, log
        self.fallback = LogExtractor(config)

    def prompt(self, run: TaskRun) -> str:
        spec = run.spec
        actions = run.actions[-self.config.worker_log_lines:]
        lines = [f"{i + 1}. {r.call_text()} -> {r.result}" for i, r in enumerate(actions)] or ["(nothing done yet)"]
        env = run.environment
        objects = "\n".join(f"- {n} ({env[n].color} {env[n].type}): {env[n].at}" for n in run.relevant if n in env) or "(none)"
        fields = {
            "{task}": run.task,
            "{specification}": spec.description if spec else run.instruction,
            "{reminders}": "\n".join(f"- {r}" for r in (spec.reminders if spec else ())) or "(none)",
            "{instruction}": run.instruction or "(none)",
            "{objects}": objects,
            "{log}": "\n".join(lines),
        }
        text = self.template
        for key, value in fields.items():
            text = text.replace(key, value)
        return text

    def __call__(self, run: TaskRun) -> WorkingMemory:
        fallback = self.fallback(run)
        try:
            raw = self.model.generate(self.prompt(run), stop=(), temperature=0.0).text
        except (LLMError, OSError) as exc:
            self.log(f"task memory: the worker model failed ({exc}); the working memory comes from the logs")
            return fallback
        answer = read_json(raw, WORKER_KEYS)
        if answer is None:
            self.log("task memory: the worker's answer held no JSON object; the working memory comes from the logs")
            return fallback
        try:
            memory = _from_answer(run, answer, fallback)
        except (TypeError, ValueError) as exc:
            self.log(f"task memory: the worker's answer is not usable ({exc}); the working memory comes from the logs")
            return fallback
        return memory


def _from_answer(run: TaskRun, answer: Mapping[str, Any], fallback: WorkingMemory) -> WorkingMemory:
    def strings(key: str) -> tuple[str, ...]:
        value = answer.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{key} must be a list of sentences")
        return tuple(str(v).strip() for v in value if str(v).strip())

    objects = answer.get("task_relevant_objects", {})
    if isinstance(objects, (list, tuple)):
        objects = {str(n): fallback.task_relevant_objects.get(str(n), "") for n in objects}
    if not isinstance(objects, Mapping):
        raise TypeError("task_relevant_objects must map object names to where they are")
    known = set(run.environment)
    made_up = sorted(str(n) for n in objects if str(n) not in known)
    if made_up:
        raise ValueError(f"objects that are not in the world: {made_up}")
    remaining, done = strings("remaining"), strings("done")
    status = DONE if done and not remaining else ACTIVE if run.current else PAUSED  # the worker's judgement
    return WorkingMemory(run.task, status, run.instruction, strings("task_reminders") or fallback.task_reminders,
                         str(answer.get("task_state", "")).strip() or fallback.task_state, done, remaining,
                         {str(k): str(v) for k, v in objects.items()}, source="worker")


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
