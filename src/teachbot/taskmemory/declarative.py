"""The declarative memory as the coordinator reads it: what ``retrieve_declarative_memory(task)`` answers.

In the multi-task memory paper the worker LLM is given a task's persistent log and extracts from its last
entry the environment state (the task's objects still at its place, not handled yet) and the task state
(where the handled ones are now: in box 1, in box 2, on the tower, with the person), Prompt 5
(prompts/task_memory_declarative.txt). :func:`extract` is the deterministic equivalent, read from the
newest logged world (the ablation ``memory-extractor``); :func:`read_answer` reads the worker's answer with
the project's one JSON reader and refuses one that names objects the world does not hold.

Besides the extraction the answer carries the task's newest logged actions, verbatim (``recent_actions``:
the call and its result, no world): they are facts copied from the log, not a model's reading of it, and
they are what the coordinator needs to say what it did last or to see that an action failed, which the
extracted state does not tell. A failed extraction is said in the answer (``source`` ``worker-failed``
and ``problem``; with the extractor as fallback, ``source`` ``extractor`` and ``problem``), never hidden.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from teachbot.language.json_reply import read_json
from teachbot.taskmemory.log import ACTION, LogRecord
from teachbot.taskmemory.specs import Environment, TaskSpec

DECLARATIVE_PROMPT = "task_memory_declarative.txt"  # Prompt 5: the environment and task state from the log
DECLARATIVE_KEYS = ("environment_state", "task_state", "pointed_at")
WORKER, EXTRACTOR, FAILED = "worker", "extractor", "worker-failed"


class Run(Protocol):
    """What the declarative memory reads of a task's run (:class:`teachbot.taskmemory.working.TaskRun`)."""

    task: str
    spec: TaskSpec | None
    records: Sequence[LogRecord]

    @property
    def relevant(self) -> tuple[str, ...]: ...

    @property
    def environment(self) -> Environment: ...

    @property
    def pointed(self) -> list[str]: ...


@dataclass(frozen=True)
class DeclarativeMemory:
    """A task's declarative memory: ``environment_state`` (its objects still at ``place``), ``task_state``
    (where each other object of it is now -> those objects, in the order they got there), ``pointed_at`` (in
    order), the newest logged ``actions`` and who extracted the state (``source``; ``problem`` when the worker
    failed)."""

    task: str
    place: str = ""
    environment_state: tuple[str, ...] = ()
    task_state: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pointed_at: tuple[str, ...] = ()
    actions: tuple[Mapping[str, Any], ...] = ()
    source: str = EXTRACTOR
    problem: str = ""

    def to_console(self) -> dict[str, Any]:
        """The dict ``retrieve_declarative_memory()`` returns; a failed extraction holds no state, only why."""
        out: dict[str, Any] = {"task": self.task, "place": self.place}
        if self.source == FAILED:
            out["problem"] = f"the state could not be extracted from the log: {self.problem}; read recent_actions"
        else:
            out.update({"environment_state": list(self.environment_state),
                        "task_state": {k: list(v) for k, v in self.task_state.items()}, "pointed_at": list(self.pointed_at)})
            if self.problem:
                out["problem"] = self.problem
        out.update({"recent_actions": [dict(a) for a in self.actions], "source": self.source})
        return out


def recent_actions(run: Run, limit: int) -> tuple[dict[str, Any], ...]:
    """The newest ``limit`` actions of the run, numbered from its first: the call and its result."""
    actions = [r for r in run.records if r.kind == ACTION]
    first = max(len(actions) - limit, 0) if limit > 0 else 0
    return tuple({"step": i, "action": r.call_text(), "result": r.result if r.ok else f"failed: {r.result}"}
                 for i, r in enumerate(actions[first:], start=first + 1))


def objects_of(run: Run) -> list[str]:
    """The run's objects: those selected when it began, else (a task without a specification) those its
    actions named, in the order they were named."""
    if run.relevant:
        return list(run.relevant)
    env = run.environment
    named = [str(a) for r in run.records if r.kind == ACTION for a in r.args if isinstance(a, str) and a in env]
    return list(dict.fromkeys(named))


def extract(run: Run, limit: int) -> DeclarativeMemory:
    """The declarative memory read deterministically from the run's newest logged world: the objects at the
    task's place, the others grouped by where they are in the order they got there, what was pointed at."""
    place = run.spec.place if run.spec else ""
    env = run.environment
    names = [n for n in objects_of(run) if n in env]
    arrived: dict[str, int] = {}
    last: dict[str, str] = {}
    for index, record in enumerate(run.records):
        for name in names:
            at = record.environment[name].at if name in record.environment else None
            if at is not None and at != last.get(name):
                last[name], arrived[name] = at, index
    state: dict[str, list[str]] = {}
    for name in sorted((n for n in names if env[n].at != place), key=lambda n: arrived.get(n, 0)):
        state.setdefault(env[name].at, []).append(name)
    return DeclarativeMemory(run.task, place, tuple(n for n in names if env[n].at == place),
                             {k: tuple(v) for k, v in state.items()}, tuple(run.pointed), recent_actions(run, limit))


def read_answer(raw: str, run: Run, limit: int) -> DeclarativeMemory:
    """The worker's declarative memory from its answer; ValueError or TypeError saying what is wrong with it
    (no JSON object, a value of the wrong form, an object the world does not hold)."""
    answer = read_json(raw, DECLARATIVE_KEYS)
    if answer is None:
        raise ValueError("the answer held no JSON object with environment_state, task_state or pointed_at")
    known = set(run.environment)

    def names(value: Any, key: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{key} must be a list of object names")
        out = tuple(str(v).strip() for v in value if str(v).strip())
        made_up = sorted(n for n in out if n not in known)
        if made_up:
            raise ValueError(f"{key} names objects that are not in the world: {made_up}")
        return out

    state = answer.get("task_state", {})
    if not isinstance(state, Mapping):
        raise TypeError("task_state must map where things are to the objects there")
    task_state = {str(at).strip(): names(listed, f"task_state[{at!r}]") for at, listed in state.items()}
    return DeclarativeMemory(run.task, run.spec.place if run.spec else "",
                             names(answer.get("environment_state", []), "environment_state"),
                             {k: v for k, v in task_state.items() if v}, names(answer.get("pointed_at", []), "pointed_at"),
                             recent_actions(run, limit), WORKER)


def failed(run: Run, limit: int, why: str) -> DeclarativeMemory:
    """The declarative memory of a failed extraction: no state, why, and the newest actions to read instead."""
    return DeclarativeMemory(run.task, run.spec.place if run.spec else "", actions=recent_actions(run, limit),
                             source=FAILED, problem=why)
