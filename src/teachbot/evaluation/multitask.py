"""The multi-task benchmark (task memory): standalone, consecutive and intervened tasks, with and without memory.

Protocol. The five tasks of config/task_memory.yaml run in the household world in-process
(teachbot.evaluation.multitask_world), each at its own place; a case loads the scenes of its task(s). The
console (teachbot.interaction.InteractionCore) is the coordinator; the simulated person follows the script
of config/benchmarks/multitask/benchmark.yaml:

- ``standalone`` A: "do A"; then asks the environment probe and the task probe about A.
- ``consecutive`` A, B: "do A"; later (a new conversation) "do B", then the probes about A.
- ``intervened`` A, B: "do A"; after ``interrupt_at`` of A's required robot actions the person interrupts
  (the next robot call fails with "the person is talking to you", the robot hears them) and says "first do
  B"; later (a new conversation) the probes about A, then "now finish A".

With ``conversations: separate`` (default) each conversation is a new console with a new task memory
reading the same store: every node restarted, as after a break. ``same`` keeps one conversation.

Judging, from the simulator's ground truth only: a task succeeds when every step of its goals is done
(teachbot.taskmemory.specs.steps over the true world and the true pointing); task retention is the task
probe's answer naming exactly the objects of the steps still open; environment retention the environment
probe's answer naming exactly the objects where it asks (in box 1; given to the person; pointed at; in the
tower). An answer naming no object counts only when it says there is nothing.

Methods (teachbot.evaluation.multitask_agent): ``memory`` (the paper's worker: object selection, Prompt 4,
and state extraction from the logs, Prompt 5; its calls, failures and fallbacks are counted per case, and
it falls back to nothing unless ``fallback`` names the extractor), ``memory-extractor`` (the labelled
ablation: the deterministic extractor, the judge's own definition of done, makes working memories) and
``no-memory`` (no task-memory functions; the task list stays in the prompt).

Trials: ``trials`` repeats every case with another seed (the stand-ins' seeded imperfection; a model's
sampling); the summary gives each rate with a 95 % interval: Wilson over the cases for one trial, a
t-interval over the per-trial rates for several (teachbot.evaluation.metrics). Results: results.jsonl
(resumable), summary.json, report.md.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, require
from teachbot.errors import ConfigError
from teachbot.evaluation.multitask_agent import Agent
from teachbot.evaluation.sweep import scene_seed
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.paths import config_path
from teachbot.taskmemory import ObjectInfo, TaskMemoryConfig, TaskSpec, steps
from teachbot.taskmemory.environment import color_of
from teachbot.tracing import evaluation_run

MODES = ("standalone", "consecutive", "intervened")
METHODS = ("memory", "memory-extractor", "no-memory")
RATES = ("success", "task_retention", "environment_retention")
RESULTS = "results.jsonl"
INTERRUPT = "the person is talking to you: stop and call wait_for_trigger() to hear them"
SWITCH = "switch"  # the key of the line that switches to the second task
NOTHING_WORDS = ("nothing", "none", "no object", "all done", "everything is done")


@dataclass(frozen=True)
class Probe:
    ask: str
    at: str = ""  # the objects of the task at this place / in this object
    pointed: bool = False  # the objects pointed at
    tower: bool = False  # the cubes in the tower


@dataclass(frozen=True)
class TaskScript:
    """What the person says about one task."""

    name: str
    start: str
    switch: str
    resume: str
    environment_probe: Probe
    task_probe: Probe


@dataclass(frozen=True)
class MultitaskConfig:
    pairs: tuple[tuple[str, str], ...]
    tasks: Mapping[str, TaskScript]
    interrupt_at: float = 0.5
    conversations: str = "separate"
    max_rounds: int = 80

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
        conversations = str(raw.get("conversations", "separate"))
        if conversations not in ("separate", "same"):
            raise ConfigError(f"{source}: multitask.conversations must be separate or same")
        fraction = float(raw.get("interrupt_at", 0.5))
        if not 0 < fraction < 1:
            raise ConfigError(f"{source}: multitask.interrupt_at must be between 0 and 1 (a fraction of the required actions)")
        return cls(pairs, tasks, fraction, conversations, int(raw.get("max_rounds", 80)))

    def cases(self, modes: Sequence[str], tasks: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """(mode, first, second) of every case to run; ``tasks`` limits them to cases whose first task is named."""
        out = []
        for mode in modes:
            if mode == "standalone":
                out += [(mode, t, "") for t in self.tasks]
            else:
                out += [(mode, a, b) for a, b in self.pairs]
        return [c for c in out if not tasks or c[1] in tasks]


# ---------------------------------------------------------------------------------------- the robot's skills
class SkillRecorder:
    """The household skills in-process, counting the robot's successful actions, logging what it really
    pointed at (the world's ground truth), and refusing the next action once the person interrupts."""

    def __init__(self, world: Any, interrupt_after: int | None = None) -> None:
        from teachbot.simrobot.direct import DirectSkills  # deferred: pybullet

        self.world = world
        self.inner = DirectSkills(world.skills())
        self.interrupt_after = interrupt_after
        self.calls: list[tuple[str, dict[str, Any], bool]] = []
        self.pointed: list[str] = []
        self.interrupted = False

    @property
    def actions(self) -> int:
        return sum(1 for _, _, ok in self.calls if ok)

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> Any:
        if self.interrupt_after is not None and not self.interrupted and self.actions >= self.interrupt_after:
            self.interrupted = True
            raise RuntimeError(INTERRUPT)
        outcome = self.inner.call(name, timeout, **fields)
        self.calls.append((name, dict(fields), bool(outcome.success)))
        if name == "point_at" and outcome.success:
            self.pointed.append(self.world.pointed_at())
        return outcome


class ScriptedPerson(DialogChannel):
    """The person of one case: says the lines of the current conversation in order (the switch line as soon
    as the robot stops for the interruption), and keeps what the robot says after each probe."""

    def __init__(self) -> None:
        super().__init__(timeout=5.0)
        self.lines: list[tuple[str, str]] = []  # (key, words); key: a probe's key, or '' for a request
        self.answers: dict[str, list[str]] = {}
        self._probe = ""
        self.heard: list[str] = []
        self.on_probe: Callable[[str], None] = lambda _key: None  # the judge notes the truth when a probe is asked
        self.on_switch: Callable[[], None] = lambda: None  # the switch is said: no interruption after it

    def wait_for_trigger(self) -> dict:
        self._probe = ""
        if not self.lines:
            raise SessionEnded("the person is done for now")
        key, text = self.lines.pop(0)
        if key == SWITCH:
            self.on_switch()
            key = ""
        if key:
            self._probe = key
            self.answers[key] = []
            self.on_probe(key)
        self.heard.append(text)
        return {"type": "dialog", "text": text}

    def ask(self, question: str) -> dict:
        self.say(question)
        return {"type": "dialog", "text": "Please go on with what I asked."}

    def say(self, text: str) -> None:
        if self._probe:
            self.answers[self._probe].append(str(text))


def conversations(mode: str, a: TaskScript, b: TaskScript | None, same: bool) -> list[list[tuple[str, str]]]:
    """The person's lines per conversation of a case."""
    probes = [("environment", a.environment_probe.ask), ("task", a.task_probe.ask)]
    if mode == "standalone":
        out = [[("", a.start), *probes]]
    elif mode == "consecutive":
        assert b is not None
        out = [[("", a.start)], [("", b.start), *probes]]
    else:
        assert b is not None
        out = [[("", a.start), (SWITCH, b.switch)], [*probes, ("", a.resume)]]
    return [[line for conv in out for line in conv]] if same else out


# ---------------------------------------------------------------------------------------- judging
@dataclass
class Judge:
    """Ground truth of one case: each task's objects (at its place when the case began) and its steps now."""

    world: Any
    memory_config: TaskMemoryConfig
    relevant: dict[str, list[str]] = field(default_factory=dict)

    def environment(self) -> dict[str, ObjectInfo]:
        world = self.world.world
        catalog = world.catalog
        type_colors = {t: s.color for t, s in catalog.types.items()}
        out = {}
        for name, at in self.world.truth().items():
            kind = world.object_type(name)
            out[name] = ObjectInfo(kind, color_of(name, kind, catalog.colors, type_colors), at)
        return out

    def start(self, specs: Iterable[TaskSpec]) -> None:
        env = self.environment()
        self.relevant = {s.name: s.relevant(env, self.memory_config.category_of) for s in specs}

    def steps(self, spec: TaskSpec, pointed: Sequence[str]) -> list[Any]:
        return steps(spec, self.relevant[spec.name], self.environment(), pointed, self.memory_config.category_of)

    def probe_truth(self, spec: TaskSpec, probe: Probe, kind: str, pointed: Sequence[str]) -> set[str]:
        all_steps = self.steps(spec, pointed)
        if kind == "task":
            return {s.object for s in all_steps if not s.done}
        if probe.pointed:
            return {n for n in pointed if n in self.relevant[spec.name]}
        if probe.tower:
            return {s.object for s in all_steps if s.done}
        env = self.environment()
        return {n for n in self.relevant[spec.name] if env[n].at == probe.at}


def named_objects(text: str, names: Iterable[str]) -> set[str]:
    """The object names a sentence mentions (longest names first, so 'red cup' is not also 'cup')."""
    lowered, found = f" {text.lower()} ", set()
    for name in sorted(names, key=len, reverse=True):
        pattern = rf"(?<![a-z0-9]){re.escape(name.lower())}(?![a-z0-9])"
        if re.search(pattern, lowered):
            found.add(name)
            lowered = re.sub(pattern, " ", lowered)
    return found


def score_answer(answer: Sequence[str], truth: set[str], names: Iterable[str]) -> float:
    """1.0 when the answer names exactly the true objects (or says there is nothing when there is none)."""
    text = " ".join(answer)
    said = named_objects(text, names)
    if not said and not truth:
        return 1.0 if any(w in text.lower() for w in NOTHING_WORDS) else 0.0
    return 1.0 if said == truth else 0.0


def required_actions(spec: TaskSpec, relevant: Sequence[str], env: Mapping[str, ObjectInfo],
                     category_of: Mapping[str, frozenset[str]]) -> int:
    """Robot actions the task needs at least (a tower's base needs none)."""
    total = 0
    for goal in spec.goals:
        chosen = [n for n in relevant if goal.selects(env[n], category_of)]
        total += spec.actions_per_step(goal) * (len(chosen) - (1 if goal.kind == "stack" and chosen else 0))
    return total


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


def case_seed(seed: int, mode: str, first: str, second: str, trial: int) -> int:
    """The seed of one case of one trial: the same for every method, so methods meet the same draws."""
    return scene_seed(seed, mode, f"{first}+{second}", 0, trial)


def run_case(world: Any, method: str, mode: str, first: str, second: str, config: MultitaskConfig,
             models: MultitaskModels, store: Path, memory_config: TaskMemoryConfig | None = None,
             between: Callable[[Path, int], None] | None = None) -> dict[str, Any]:
    """One case; its results line. ``between(store, k)`` runs after conversation ``k`` (from 0) when another
    follows: an experiment on the declarative memory (deleting or corrupting the logs)."""

    started = time.monotonic()
    memory_config = memory_config or TaskMemoryConfig.load()
    specs = memory_config.tasks("household")
    names = [first] + ([second] if second else [])
    world.load(*names)
    judge = Judge(world, memory_config)
    judge.start(specs[n] for n in names)
    env0 = judge.environment()
    need = {n: required_actions(specs[n], judge.relevant[n], env0, memory_config.category_of) for n in names}
    interrupt = math.ceil(need[first] * config.interrupt_at) if mode == "intervened" else None
    recorder = SkillRecorder(world, interrupt)
    person = ScriptedPerson()
    truths: dict[str, set[str]] = {}
    probes = {k: getattr(config.tasks[first], f"{k}_probe") for k in ("environment", "task")}
    person.on_switch = lambda: setattr(recorder, "interrupt_after", None)
    person.on_probe = lambda key: truths.__setitem__(key, judge.probe_truth(specs[first], probes[key], key, recorder.pointed))
    shutil.rmtree(store, ignore_errors=True)
    plan = conversations(mode, config.tasks[first], config.tasks.get(second), config.conversations == "same")
    agent = Agent(method, models, store, world, recorder, person, judge.environment, memory_config, config.max_rounds)
    stops: list[str] = []
    transcripts: list[str] = []
    for k, lines in enumerate(plan):
        if k and between is not None:
            between(store, k - 1)
        person.lines = list(lines)
        stops += agent.conversation(transcripts)  # a new console (and task memory) per conversation
    pointed = recorder.pointed
    done = {n: all(s.done for s in judge.steps(specs[n], pointed)) and bool(judge.relevant[n]) for n in names}
    every = judge.relevant[first]  # answers are read for the task's objects (box 1 in "into box 1" is not one)
    retention = {}
    for kind in ("environment", "task"):
        if kind in person.answers:
            truth = truths[kind]
            retention[kind] = {"score": score_answer(person.answers[kind], truth, every), "truth": sorted(truth),
                               "answer": " ".join(person.answers[kind])}
    return {"method": method, "mode": mode, "first": first, "second": second, "success": all(done.values()),
            "done": done, "task_retention": retention.get("task", {}).get("score"),
            "environment_retention": retention.get("environment", {}).get("score"), "probes": retention,
            "interrupted": recorder.interrupted, "actions": recorder.actions, "required_actions": sum(need.values()),
            "pointed": pointed, "stops": stops, "heard": person.heard, "models": models.label,
            "worker": agent.worker.stats.to_json() if agent.worker is not None else None,
            "tokens": agent.tokens, "wall_s": round(time.monotonic() - started, 3), "transcript": "\n".join(transcripts)}


def read_results(out: Path) -> list[dict[str, Any]]:
    path = out / RESULTS
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_multitask(out: Path, models: MultitaskModels, *, methods: Sequence[str] = ("memory", "no-memory"),
                  modes: Sequence[str] = MODES, tasks: Sequence[str] = (), config: MultitaskConfig | None = None,
                  trials: int = 1, seed: int = 0, progress: Callable[[str], None] = lambda _line: None) -> Path:
    """Run (or resume) every case of ``methods`` x ``modes`` ``trials`` times; returns results.jsonl."""
    from teachbot.evaluation.multitask_world import MultitaskWorld  # deferred: pybullet

    unknown = [m for m in methods if m not in METHODS] + [m for m in modes if m not in MODES]
    if unknown:
        raise ConfigError(f"unknown methods or modes {unknown}; methods: {', '.join(METHODS)}; modes: {', '.join(MODES)}")
    if "memory" in methods and models.worker is None:
        raise ConfigError("memory needs a worker model: the doubles' worker, or --models config (the task_memory_worker role)")
    if trials < 1:
        raise ConfigError(f"trials must be 1 or more, got {trials}")
    config = config or MultitaskConfig.load()
    out.mkdir(parents=True, exist_ok=True)
    seen = {(r["method"], r["mode"], r["first"], r["second"], int(r.get("trial", 0))) for r in read_results(out)}
    results = out / RESULTS
    with MultitaskWorld() as world:
        for trial in range(trials):
            for method in methods:
                for mode, first, second in config.cases(modes, tasks):
                    if (method, mode, first, second, trial) in seen:
                        continue
                    drawn = case_seed(seed, mode, first, second, trial)
                    store = out / "stores" / (method if trial == 0 else f"trial-{trial}/{method}")
                    with evaluation_run("multitask", method=method, mode=mode, task=first, second=second) as trace_id:
                        row = {**run_case(world, method, mode, first, second, config, models.for_case(drawn), store),
                               "trial": trial, "seed": drawn, "trace_id": trace_id}
                    with results.open("a") as handle:
                        handle.write(json.dumps(row) + "\n")
                    progress(f"{method} {mode} {first}{'+' + second if second else ''} (trial {trial}): "
                             f"{'success' if row['success'] else 'failed'}")
    return results
