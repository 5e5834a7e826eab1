"""The core paper's metrics over evaluation runs: s (success), i (initial success), n (interactions).

A run is one instruction given to the robot; each time the console hands control back to the person
(it calls ``wait_for_trigger()``) the harness records a *return* with its state: success, failure,
error (an unhandled exception) or timeout. On anything but success the simulated person corrects the
robot, up to a limit. Then, per group of runs:

- s: the share of runs that end in success, after any help from the person;
- i: the share of runs whose first return is already a success, with no help;
- n: the mean number of the person's interactions (corrections) until the first success, over the
  successful runs only (0 for a run that succeeded at once).

One line of ``results.jsonl`` is a ``RunRecord``; ``summarize`` gives ``summary.json``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATES = ("success", "failure", "error", "timeout")


@dataclass(frozen=True)
class Return:
    """One return of control: what the world looked like to the checker, and what the person said then."""

    state: str
    utterance: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"a return's state is one of {', '.join(STATES)}, got {self.state!r}")


@dataclass(frozen=True)
class RunRecord:
    """One run of one method on one instruction; serialised as one line of results.jsonl."""

    method: str
    split: str
    template: str
    run: int
    instruction: str
    returns: tuple[Return, ...]
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # seed, scene, transcript path, ...

    @property
    def outcome(self) -> str:
        """success when any return succeeded; else the last return's state (failure when there was none)."""
        if any(r.state == "success" for r in self.returns):
            return "success"
        return self.returns[-1].state if self.returns else "failure"

    @property
    def interactions_until_success(self) -> int | None:
        """Corrections the person gave before the first success; None when the run never succeeded."""
        for index, ret in enumerate(self.returns):
            if ret.state == "success":
                return index
        return None

    @property
    def initial_success(self) -> bool:
        return bool(self.returns) and self.returns[0].state == "success"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["returns"] = [asdict(r) for r in self.returns]
        data["outcome"] = self.outcome
        data["interactions_until_success"] = self.interactions_until_success
        extra = data.pop("extra")
        return {**data, **({"extra": extra} if extra else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        return cls(
            method=str(data["method"]), split=str(data["split"]), template=str(data["template"]), run=int(data["run"]),
            instruction=str(data["instruction"]),
            returns=tuple(Return(str(r["state"]), str(r.get("utterance", ""))) for r in data["returns"]),
            tokens=int(data.get("tokens", 0)), cost_usd=float(data.get("cost_usd", 0.0)),
            wall_s=float(data.get("wall_s", 0.0)), extra=dict(data.get("extra", {})),
        )


@dataclass(frozen=True)
class Scores:
    s: float  # percent
    i: float  # percent
    n: float | None  # None when no run succeeded
    runs: int

    def to_json(self) -> dict[str, Any]:
        return {"s": round(self.s, 2), "i": round(self.i, 2), "n": None if self.n is None else round(self.n, 3),
                "runs": self.runs}


def score(records: Sequence[RunRecord]) -> Scores:
    """s, i and n of a group of runs (an empty group scores 0 with no n)."""
    if not records:
        return Scores(0.0, 0.0, None, 0)
    successes = [r.interactions_until_success for r in records if r.interactions_until_success is not None]
    s = 100.0 * len(successes) / len(records)
    i = 100.0 * sum(r.initial_success for r in records) / len(records)
    n = sum(successes) / len(successes) if successes else None
    return Scores(s, i, n, len(records))


def summarize(records: Iterable[RunRecord], by_template: bool = False) -> dict[str, dict[str, Any]]:
    """``{method: {split: scores}}`` (``summary.json``); with ``by_template`` one more level per template."""
    groups: dict[tuple[str, ...], list[RunRecord]] = defaultdict(list)
    for record in records:
        key = (record.method, record.split, record.template) if by_template else (record.method, record.split)
        groups[key].append(record)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(groups):
        scores = score(groups[key]).to_json()
        if by_template:
            out.setdefault(key[0], {}).setdefault(key[1], {})[key[2]] = scores
        else:
            out.setdefault(key[0], {})[key[1]] = scores
    return out


def learning_curve(records: Iterable[RunRecord]) -> dict[tuple[str, str], list[tuple[int, Scores]]]:
    """Per (method, split): the scores of each run index over all templates (the paper's curves of i and n)."""
    groups: dict[tuple[str, str], dict[int, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        groups[(record.method, record.split)][record.run].append(record)
    return {key: [(run, score(runs[run])) for run in sorted(runs)] for key, runs in groups.items()}


def read_results(path: str | Path) -> list[RunRecord]:
    """The records of a results.jsonl; a line that is not a record names its number."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(RunRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} line {number} is not a run record ({exc}); was it written by teachbot eval?") from None
    return records
