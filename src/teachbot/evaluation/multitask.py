"""The multi-task benchmark (task memory): the paper's protocol over its five tasks, with and without memory.

Protocol (teachbot.evaluation.multitask_protocol). The five tasks of config/task_memory.yaml (the paper's
Table I: sort, arrangement, pointing, recipe, tower, distractors included) run in the household world
in-process (teachbot.evaluation.multitask_world), each at its own place; a case loads the scenes of its
tasks together. The console (teachbot.interaction.InteractionCore) is the coordinator; the simulated person
follows config/benchmarks/multitask/benchmark.yaml. The default, ``paper``: the five tasks in one chat in
the paper's order, mode ``intervened`` (each interrupted at half its required actions in a first round,
resumed in a second, the chat reset only at the end); ``consecutive`` and ``standalone`` as the paper's
other two modes. ``pairs`` is the older two-task deviation, off by default. Interruptions are enforced: an
action touching an interrupted task's objects before the person asks to go on is refused and counted.

Judging (teachbot.evaluation.multitask_judge), from the simulator's ground truth only: a task succeeds
when every step of its goals is done and no action while it was asked for touched anything but its goal
objects and containers, and none ran on it while it was stopped; task and environment retention: the
probes' answers name exactly the true objects (names matched tolerantly); in the paper protocol every
task is probed after its round-2 part, in ``pairs`` the first task before it is resumed.

Methods (teachbot.evaluation.multitask_agent): ``memory`` (the paper's worker: object selection, Prompt 4,
and state extraction from the logs, Prompt 5; its calls, failures and fallbacks are counted per case, and
it falls back to nothing unless ``fallback`` names the extractor), ``memory-extractor`` (the labelled
ablation: the deterministic extractor, the judge's own definition of done, makes working memories) and
``no-memory`` (no task-memory functions; the task list stays in the prompt, and the chat keeps its history).

Trials: ``trials`` repeats every case with another seed (the stand-ins' seeded imperfection; a model's
sampling); the summary gives each rate with a 95 % interval: Wilson over the cases for one trial, a
t-interval over the per-trial rates for several (teachbot.evaluation.metrics). Results: results.jsonl
(resumable), summary.json, report.md.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, require
from teachbot.errors import ConfigError
from teachbot.evaluation.multitask_agent import Agent
from teachbot.evaluation.multitask_judge import Judge, Probe, named_objects, required_actions, score_answer
from teachbot.evaluation.multitask_protocol import (
    INTERRUPT,
    MODES,
    PROBES,
    PROTOCOLS,
    Line,
    ScriptedPerson,
    SkillRecorder,
    TaskScript,
    interruption_points,
    pair_chats,
    paper_chats,
)
from teachbot.evaluation.sweep import scene_seed
from teachbot.paths import config_path
from teachbot.taskmemory import TaskMemoryConfig
from teachbot.tracing import evaluation_run

__all__ = ["INTERRUPT", "METHODS", "MODES", "PROTOCOLS", "RATES", "Judge", "Line", "MultitaskConfig", "MultitaskModels",
           "Probe", "ScriptedPerson", "SkillRecorder", "TaskScript", "named_objects", "required_actions", "run_case",
           "run_multitask", "score_answer"]

METHODS = ("memory", "memory-extractor", "no-memory")
RATES = ("success", "task_retention", "environment_retention")
RESULTS = "results.jsonl"


@dataclass(frozen=True)
class MultitaskConfig:
    """config/benchmarks/multitask/benchmark.yaml: the paper's task ``order``, the ``pairs`` of the deviation,
    the person's lines per task, the interruption point, how the pairs' conversations run, the statements
    per chat."""

    pairs: tuple[tuple[str, str], ...]
    tasks: Mapping[str, TaskScript]
    interrupt_at: float = 0.5
    conversations: str = "separate"
    max_rounds: int = 300
    order: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: str | Path | None = None, memory: TaskMemoryConfig | None = None) -> MultitaskConfig:
        path = Path(path) if path else config_path("benchmarks", "multitask", "benchmark.yaml")
        source = str(path)
        raw = require(load_yaml(path), "multitask", source, dict)
        specs = (memory or TaskMemoryConfig.load()).tasks("household")
        tasks = {}
        for name, row in require(raw, "tasks", source, dict).items():
            where = f"{source}: multitask.tasks.{name}"
            if name not in specs:
                raise ConfigError(f"{where}: no such task in config/task_memory.yaml ({', '.join(specs)})")
            probes = {k: Probe(**require(row, k, where, dict)) for k in ("environment_probe", "task_probe")}
            tasks[str(name)] = TaskScript(str(name), *(str(require(row, k, where, str)) for k in ("start", "switch", "resume")),
                                          **probes)
        pairs = tuple((str(a), str(b)) for a, b in require(raw, "pairs", source, list))
        for a, b in pairs:
            if a not in tasks or b not in tasks:
                raise ConfigError(f"{source}: pair [{a}, {b}] names a task without a script under multitask.tasks")
            if specs[a].place == specs[b].place:
                raise ConfigError(f"{source}: pair [{a}, {b}]: both tasks work at the {specs[a].place}; pair tasks of different places")
        order = tuple(str(t) for t in raw.get("order") or tasks)
        missing = [t for t in order if t not in tasks]
        if missing or len(set(order)) != len(order):
            raise ConfigError(f"{source}: multitask.order must name each task of multitask.tasks once, got {list(order)}")
        conversations = str(raw.get("conversations", "separate"))
        if conversations not in ("separate", "same"):
            raise ConfigError(f"{source}: multitask.conversations must be separate or same")
        fraction = float(raw.get("interrupt_at", 0.5))
        if not 0 < fraction < 1:
            raise ConfigError(f"{source}: multitask.interrupt_at must be between 0 and 1 (a fraction of the required actions)")
        return cls(pairs, tasks, fraction, conversations, int(raw.get("max_rounds", 300)), order)

    def cases(self, modes: Sequence[str], tasks: Sequence[str] = (), protocol: str = "paper") -> list[tuple[str, tuple[str, ...]]]:
        """(mode, tasks) of every case to run. The paper: one case per mode over the tasks in ``order``
        (``tasks`` keeps only those named); pairs: a case per pair (per task for standalone), ``tasks``
        keeping cases whose first task is named."""
        if protocol == "paper":
            chosen = tuple(t for t in self.order if not tasks or t in tasks)
            return [(mode, chosen) for mode in modes] if chosen else []
        out: list[tuple[str, tuple[str, ...]]] = []
        for mode in modes:
            out += [(mode, (t,)) for t in self.tasks] if mode == "standalone" else [(mode, p) for p in self.pairs]
        return [c for c in out if not tasks or c[1][0] in tasks]


# ---------------------------------------------------------------------------------------- running
@dataclass(frozen=True)
class MultitaskModels:
    """The coordinator (``interaction``) and the worker of a run; ``fallback``: let the extractor answer when
    the worker fails (a named deviation from the paper, off by default; counted either way)."""

    interaction: Any
    worker: Any = None
    label: str = "doubles"
    fallback: bool = False

    def for_case(self, seed: int) -> MultitaskModels:
        """The models of one case: stand-ins reseeded (their imperfection drawn anew), real models as they are."""
        def reseed(model: Any) -> Any:
            return model.reseeded(seed) if hasattr(model, "reseeded") else model

        return MultitaskModels(reseed(self.interaction), reseed(self.worker), self.label, self.fallback)


def case_key(protocol: str, tasks: Sequence[str]) -> str:
    """A case's key in results.jsonl: the paper's tasks joined ('sort+fruit_bowl+...'), a pair's 'first+second'."""
    return "+".join(tasks) if protocol == "paper" else f"{tasks[0]}+{tasks[1] if len(tasks) > 1 else ''}"


def case_seed(seed: int, mode: str, key: str, trial: int, protocol: str = "paper") -> int:
    """The seed of one case of one trial: the same for every method, so methods meet the same draws."""
    return scene_seed(seed, mode if protocol == "pairs" else f"paper/{mode}", key, 0, trial)


def run_case(world: Any, method: str, mode: str, tasks: Sequence[str], config: MultitaskConfig, models: MultitaskModels,
             store: Path, memory_config: TaskMemoryConfig | None = None, between: Callable[[Path, int], None] | None = None,
             protocol: str = "paper") -> dict[str, Any]:
    """One case (``tasks``: the paper's sequence, or a pair); its results line. ``between(store, k)`` runs
    after chat ``k`` (from 0) when another follows: an experiment on the declarative memory (deleting or
    corrupting the logs)."""

    started = time.monotonic()
    memory_config = memory_config or TaskMemoryConfig.load()
    specs = memory_config.tasks("household")
    names = list(tasks)
    world.load(*names)
    judge = Judge(world, memory_config)
    judge.start(specs[n] for n in names)
    env0 = judge.environment()
    need = {n: required_actions(specs[n], judge.relevant[n], env0, memory_config.category_of) for n in names}
    recorder = SkillRecorder(world, judge.objects, interruption_points(mode, protocol, names, need, config.interrupt_at))
    person = ScriptedPerson()
    truths: dict[tuple[str, str], set[str]] = {}

    def heard(line: Line) -> None:
        recorder.hear(line)
        if line.kind in PROBES:
            probe = getattr(config.tasks[line.task], f"{line.kind}_probe")
            truths[(line.task, line.kind)] = judge.probe_truth(specs[line.task], probe, line.kind, recorder.pointed)

    person.on_line = heard
    shutil.rmtree(store, ignore_errors=True)
    scripts = [config.tasks[n] for n in names]
    if protocol == "paper":
        plan = paper_chats(mode, scripts)
    else:
        plan = pair_chats(mode, scripts[0], scripts[1] if len(scripts) > 1 else None, config.conversations == "same")
    agent = Agent(method, models, store, world, recorder, person, judge.environment, memory_config, config.max_rounds)
    stops: list[str] = []
    transcripts: list[str] = []
    for k, lines in enumerate(plan):
        if k and between is not None:
            between(store, k - 1)
        person.lines = list(lines)
        stops += agent.conversation(transcripts)  # a new console (and task memory) per chat
    pointed = recorder.pointed
    goals = {n: judge.done(specs[n], pointed) for n in names}
    done = {n: goals[n] and not recorder.violations[n] for n in names}
    probes: dict[str, dict[str, Any]] = {}
    for (task, kind), answer in person.answers.items():
        truth = truths[(task, kind)]
        probes.setdefault(task, {})[kind] = {"score": judge.matcher(task).score(answer, truth), "truth": sorted(truth),
                                             "answer": " ".join(answer)}
    first = names[0]
    return {"protocol": protocol, "method": method, "mode": mode, "tasks": names, "case": case_key(protocol, names),
            "first": first, "second": names[1] if protocol == "pairs" and len(names) > 1 else "",
            "success": all(done.values()), "done": done, "goals_done": goals, "violations": recorder.violations,
            "task_retention": probes.get(first, {}).get("task", {}).get("score"),
            "environment_retention": probes.get(first, {}).get("environment", {}).get("score"), "probes": probes,
            "interrupted": any(recorder.interrupted.values()), "interruptions": recorder.interrupted,
            "actions": recorder.actions, "task_actions": recorder.task_actions, "required": need,
            "required_actions": sum(need.values()), "refused": sum(1 for c in recorder.calls if c.refused),
            "put_back": sum(1 for c in recorder.calls if c.put_back), "pointed": pointed, "stops": stops,
            "heard": person.heard, "models": models.label,
            "worker": agent.worker.stats.to_json() if agent.worker is not None else None,
            "tokens": agent.tokens, "wall_s": round(time.monotonic() - started, 3), "transcript": "\n".join(transcripts)}


def read_results(out: Path) -> list[dict[str, Any]]:
    path = out / RESULTS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _done_key(row: Mapping[str, Any]) -> tuple[str, str, str, str, int]:
    protocol = str(row.get("protocol", "pairs"))  # rows before the paper's protocol were pairs
    key = row.get("case") or f"{row['first']}+{row['second']}"
    return protocol, str(row["method"]), str(row["mode"]), str(key), int(row.get("trial", 0))


def run_multitask(out: Path, models: MultitaskModels, *, methods: Sequence[str] = ("memory", "no-memory"),
                  modes: Sequence[str] = ("intervened",), tasks: Sequence[str] = (), config: MultitaskConfig | None = None,
                  trials: int = 1, seed: int = 0, protocol: str = "paper",
                  progress: Callable[[str], None] = lambda _line: None) -> Path:
    """Run (or resume) every case of ``methods`` x ``modes`` under ``protocol`` ``trials`` times; returns results.jsonl."""
    from teachbot.evaluation.multitask_world import MultitaskWorld  # deferred: pybullet

    unknown = [m for m in methods if m not in METHODS] + [m for m in modes if m not in MODES]
    if unknown or protocol not in PROTOCOLS:
        raise ConfigError(f"unknown methods, modes or protocol {unknown or [protocol]}; methods: {', '.join(METHODS)}; "
                          f"modes: {', '.join(MODES)}; protocols: {', '.join(PROTOCOLS)}")
    if "memory" in methods and models.worker is None:
        raise ConfigError("memory needs a worker model: the doubles' worker, or --models config (the task_memory_worker role)")
    if trials < 1:
        raise ConfigError(f"trials must be 1 or more, got {trials}")
    config = config or MultitaskConfig.load()
    out.mkdir(parents=True, exist_ok=True)
    seen = {_done_key(r) for r in read_results(out)}
    results = out / RESULTS
    with MultitaskWorld() as world:
        for trial in range(trials):
            for method in methods:
                for mode, names in config.cases(modes, tasks, protocol):
                    key = case_key(protocol, names)
                    if (protocol, method, mode, key, trial) in seen:
                        continue
                    drawn = case_seed(seed, mode, key, trial, protocol)
                    store = out / "stores" / (method if trial == 0 else f"trial-{trial}/{method}")
                    with evaluation_run("multitask", method=method, mode=mode, task=names[0], second="+".join(names[1:]),
                                        protocol=protocol) as trace_id:
                        row = {**run_case(world, method, mode, names, config, models.for_case(drawn), store, protocol=protocol),
                               "trial": trial, "seed": drawn, "trace_id": trace_id}
                    with results.open("a") as handle:
                        handle.write(json.dumps(row) + "\n")
                    failed = [n for n, ok in row["done"].items() if not ok]
                    progress(f"{protocol} {method} {mode} {key} (trial {trial}): "
                             f"{'success' if not failed else 'failed ' + ', '.join(failed)}")
    return results
