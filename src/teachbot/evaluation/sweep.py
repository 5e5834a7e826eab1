"""A sweep of the tabletop protocol: methods x trials x splits x templates x runs, recorded, resumable.

The order is fixed and seeded: for each method, each trial, each split, each template, ``runs`` runs in
sequence, memory kept across all of them (a method's own learned store under ``OUT/stores/<method>``).
Run ``r`` of a template in a split gets the same scene and attributes for every method (its seed depends
on split, template, run and trial only), so methods are compared on the same work and a rerun repeats it.
A trial repeats the whole schedule with other seeds (scenes, and so the person's draws), each method
learning from scratch in a store of its own (``OUT/stores/trial-<t>/<method>``); trial 0 has the seeds and
the store a sweep had before there were trials, so its results stay valid.
``results.jsonl`` gains one line per finished run; a sweep started again with the same settings skips
what is there and goes on (the stores hold what was learned before the interruption).
Workers split the methods between them (each an isolated stack with its own ROS domain), so the
per-method order that learning needs is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.errors import ConfigError
from teachbot.evaluation.benchmark import SPLITS, Benchmark
from teachbot.evaluation.metrics import RunRecord, read_results
from teachbot.evaluation.person import PersonConfig

SWEEP_FILE = "sweep.json"
RESULTS = "results.jsonl"
# Named deviations from the core paper's protocol (its section 4.1), each off unless a sweep names it (--deviation);
# sweep.json and the report say which were on.
DEVIATIONS = {
    "continue-after-errors": "when the console gives up on errors or its round limit, the person corrects the robot "
                             "and a new episode starts (the paper ends the run)",
    "wall-clock-timeout": "the run's timeout is wall-clock time, the model's latency included (the paper's counts the "
                          "robot's work: here its motion time and the console's round limit)",
    "rehearse-lessons": "a lesson waits until the person accepts the corrected task, is replayed from the run's first "
                        "scene in a copy of the simulated world and kept only when it ends where they accepted it "
                        "(teachbot.learning.rehearsal; the paper keeps every lesson)",
}


@dataclass(frozen=True)
class SweepConfig:
    """What defines a sweep; an output directory holds one (``sweep.json``)."""

    methods: tuple[str, ...]
    splits: tuple[str, ...] = SPLITS
    runs: int = 10
    templates: int = 0  # the first N templates of each split (0: all)
    only: tuple[str, ...] = ()  # these template keys only (empty: as ``templates`` says)
    seed: int = 0
    person: PersonConfig = field(default_factory=PersonConfig)
    llm: dict[str, Any] = field(default_factory=dict)  # per role: backend, model, base_url (what answered); the prices used
    run_timeout: float = 300.0
    seeds_dir: str = ""  # seed examples of every method's store ("" = memory_store/, as config/memory.yaml says)
    deviations: tuple[str, ...] = ()  # names of DEVIATIONS that are on (none: the paper's protocol)
    trials: int = 1  # the schedule repeated with other seeds, each trial learning from scratch

    def to_json(self) -> dict[str, Any]:
        """The settings as ``sweep.json`` holds them."""
        data = asdict(self)
        data["methods"], data["splits"], data["only"] = list(self.methods), list(self.splits), list(self.only)
        data["deviations"] = list(self.deviations)
        return data


# Settings that sweep.json gained after sweeps were recorded, with the value such a sweep ran with: an old
# directory resumes as the same sweep.
ADDED_SETTINGS: dict[str, Any] = {"trials": 1}

RunKey = tuple[str, str, str, int, int]  # method, split, template, run, trial


@dataclass(frozen=True)
class ScheduledRun:
    method: str
    split: str
    template: str
    run: int
    seed: int
    trial: int = 0

    @property
    def key(self) -> RunKey:
        """What names the run in results.jsonl: a resumed sweep skips the keys it holds."""
        return (self.method, self.split, self.template, self.run, self.trial)


def scene_seed(sweep_seed: int, split: str, template: str, run: int, trial: int = 0) -> int:
    """The seed of one scene: the same for every method of the sweep; trial 0's is the seed sweeps had before trials."""
    name = f"{sweep_seed}/{split}/{template}/{run}" + (f"/trial-{trial}" if trial else "")
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "little")


def store_dir(out: Path, method: str, trial: int = 0) -> Path:
    """The learned store of ``method`` in ``trial``: ``OUT/stores/<method>`` for trial 0 (as before trials), else
    ``OUT/stores/trial-<t>/<method>``, so each trial learns from scratch."""
    return out / "stores" / method if trial == 0 else out / "stores" / f"trial-{trial}" / method


def templates_of(split: str, tasks: dict[str, type], limit: int = 0, only: Sequence[str] = ()) -> list[str]:
    """The template keys of a split in benchmark order (the first ``limit`` when set; of ``only`` when given)."""
    benchmark = Benchmark.load()
    order = {t: i for i, t in enumerate(benchmark.split_instructions(split))}
    keys = sorted((k for k, cls in tasks.items() if split in cls.splits() and (not only or k in only)),
                  key=lambda k: order.get(tasks[k].template, 99))
    return keys[:limit] if limit else keys


def schedule(config: SweepConfig, tasks: dict[str, type]) -> list[ScheduledRun]:
    """Every run of the sweep in the order it is run."""
    templates = {split: templates_of(split, tasks, config.templates, config.only) for split in config.splits}
    return [
        ScheduledRun(method, split, template, run, scene_seed(config.seed, split, template, run, trial), trial)
        for method in config.methods for trial in range(config.trials) for split in config.splits
        for template in templates[split] for run in range(config.runs)
    ]


def validate(config: SweepConfig, tasks: dict[str, type], methods: Sequence[str]) -> None:
    """Bad input, one clear line each (ConfigError)."""
    for split in config.splits:
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    for method in config.methods:
        if method not in methods:
            raise ConfigError(f"unknown method {method!r}; methods: {', '.join(methods)}")
    if config.runs < 1:
        raise ConfigError(f"--runs must be at least 1, got {config.runs}")
    if config.trials < 1:
        raise ConfigError(f"--trials must be at least 1 (1: the schedule once; N: N times with other seeds, for the "
                          f"report's intervals over trials), got {config.trials}")
    for key in config.only:
        if key not in tasks:
            raise ConfigError(f"unknown template {key!r}; templates: {', '.join(tasks)}")
    for name in config.deviations:
        if name not in DEVIATIONS:
            raise ConfigError(f"unknown deviation {name!r}; deviations from the paper's protocol: {', '.join(DEVIATIONS)}")
    if config.templates < 0:
        raise ConfigError(f"--templates must be 0 (all) or more, got {config.templates}")


def open_output(out: Path, config: SweepConfig) -> set[RunKey]:
    """Create ``out`` for this sweep, or resume it; returns the runs already done.

    A directory that holds another sweep (other settings) or files that are not a sweep's is refused,
    so nothing is overwritten. A sweep.json from before a setting existed holds that setting's old value
    (ADDED_SETTINGS). More trials of the same sweep go on where it is (its runs so far are the first trials')."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / SWEEP_FILE
    wanted = config.to_json()
    if marker.exists():
        held = {**ADDED_SETTINGS, **json.loads(marker.read_text())}
        diff = sorted(k for k in set(held) | set(wanted) if held.get(k) != wanted.get(k))
        if diff == ["trials"] and int(held["trials"]) < config.trials:
            marker.write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")  # the same sweep, more trials
        elif diff:
            raise ConfigError(f"{out} holds another sweep (it differs in {', '.join(diff)}); choose another --out, "
                              "or repeat that sweep's settings to resume it (a higher --trials adds trials)")
    elif any(out.iterdir()):
        raise ConfigError(f"{out} is not empty and holds no sweep ({SWEEP_FILE}); choose an empty or new --out")
    else:
        marker.write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")
    results = out / RESULTS
    return {(r.method, r.split, r.template, r.run, r.trial) for r in read_results(results)} if results.exists() else set()


def append_result(out: Path, record: RunRecord) -> None:
    """One line into results.jsonl, whole, under a lock (workers append to the same file)."""
    line = json.dumps(record.to_json(), sort_keys=False) + "\n"
    with open(out / RESULTS, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write(line)
            handle.flush()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def progress(total: int, done: int, enabled: bool) -> Iterator[Callable[[RunRecord], None]]:
    """A tqdm bar of runs with ETA, tokens and money so far; yields the per-run update."""
    from tqdm import tqdm  # deferred: tqdm

    tokens, money = [0], [0.0]
    bar = tqdm(total=total, initial=done, unit="run", disable=not enabled, dynamic_ncols=True)

    def update(record: RunRecord) -> None:
        tokens[0] += record.tokens
        money[0] += record.cost_usd
        trial = f" trial {record.trial}" if record.trial else ""
        bar.set_postfix_str(f"{record.method}{trial} {record.split} {record.template}: {record.outcome}; "
                            f"{tokens[0]:,} tokens, ${money[0]:.4f}")
        bar.update(1)

    try:
        yield update
    finally:
        bar.close()


def prepare_episode(task_cls: type, run: ScheduledRun) -> Any:
    """The scheduled run's episode: attributes and scene from its seed."""
    return task_cls.sample(np.random.default_rng(run.seed), run.split)


def split_methods(methods: Sequence[str], workers: int) -> list[list[str]]:
    """Methods dealt round-robin to ``workers`` (each method wholly on one worker)."""
    groups: list[list[str]] = [[] for _ in range(max(1, min(workers, len(methods))))]
    for index, method in enumerate(methods):
        groups[index % len(groups)].append(method)
    return groups

