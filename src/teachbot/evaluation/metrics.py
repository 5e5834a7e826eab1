"""The core paper's metrics over evaluation runs: s (success), i (initial success), n (interactions).

A run is one instruction given to the robot; each time the console hands control back to the person
(it calls ``wait_for_trigger()``) the harness records a *return* with its state: success, failure,
error (an unhandled exception) or timeout. On anything but success the simulated person corrects the
robot, up to a limit. Then, per group of runs:

- s: the share of runs that end in success, after any help from the person;
- i: the share of runs whose first return is already a success, with no help;
- n: the mean number of the person's interactions (corrections) until the first success, over the
  successful runs only (0 for a run that succeeded at once).

Each score has a 95 % interval. A group whose runs come from one trial (one seed of the sweep): a Wilson
score interval for s and i (each run a Bernoulli draw) and a Student-t interval for n over the successful
runs' counts. A group from several trials (the schedule repeated with other seeds, each trial learning
from scratch): s, i and n are the means of the per-trial scores, each with a Student-t interval over them.
Intervals are clipped to what the score can be (0–100 %, n >= 0); with fewer than two values n (or a
score over trials) has none.

One line of ``results.jsonl`` is a ``RunRecord``; ``summarize`` gives ``summary.json``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATES = ("success", "failure", "error", "timeout")
CONFIDENCE = 0.95
OVER_RUNS, OVER_TRIALS = "runs", "trials"  # what a group's intervals are over (Scores.over)


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
    trial: int = 0  # which repetition of the sweep's schedule (a line without it is trial 0's)

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
        """The results.jsonl line: the fields, the outcome and n of the run, ``extra`` only when it holds anything."""
        data = asdict(self)
        data["returns"] = [asdict(r) for r in self.returns]
        data["outcome"] = self.outcome
        data["interactions_until_success"] = self.interactions_until_success
        extra = data.pop("extra")
        return {**data, **({"extra": extra} if extra else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """A record from its results.jsonl line (older lines lack ``trial``: trial 0)."""
        return cls(
            method=str(data["method"]), split=str(data["split"]), template=str(data["template"]), run=int(data["run"]),
            instruction=str(data["instruction"]),
            returns=tuple(Return(str(r["state"]), str(r.get("utterance", ""))) for r in data["returns"]),
            tokens=int(data.get("tokens", 0)), cost_usd=float(data.get("cost_usd", 0.0)),
            wall_s=float(data.get("wall_s", 0.0)), extra=dict(data.get("extra", {})), trial=int(data.get("trial", 0)),
        )


Interval = tuple[float, float]


def wilson(successes: int, total: int, confidence: float = CONFIDENCE) -> Interval | None:
    """The Wilson score interval of a binomial share, as fractions in [0, 1]; None for no draws."""
    if total <= 0:
        return None
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = successes / total, z * z
    centre = (p + z2 / (2 * total)) / (1 + z2 / total)
    half = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total)) / (1 + z2 / total)
    return (0.0 if successes == 0 else max(0.0, centre - half)), (1.0 if successes == total else min(1.0, centre + half))


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The Student-t interval of the mean of ``values`` (mean ± t * s / sqrt(k)); None for fewer than two."""
    if len(values) < 2:
        return None
    from scipy.stats import t  # deferred: scipy

    mean = statistics.fmean(values)
    half = float(t.ppf(0.5 + confidence / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


@dataclass(frozen=True)
class Scores:
    """s, i, n of a group of runs with their 95 % intervals (``over``: runs for one trial, trials for several)."""

    s: float  # percent
    i: float  # percent
    n: float | None  # None when no run succeeded
    runs: int
    trials: int = 1
    over: str = OVER_RUNS
    s_ci: Interval | None = None
    i_ci: Interval | None = None
    n_ci: Interval | None = None

    def to_json(self, intervals: bool = False) -> dict[str, Any]:
        """s, i, n and runs; with ``intervals`` also the trials and ``ci95`` (each score's [low, high], and ``over``)."""
        data: dict[str, Any] = {"s": round(self.s, 2), "i": round(self.i, 2),
                                "n": None if self.n is None else round(self.n, 3), "runs": self.runs}
        if intervals:
            def pair(ci: Interval | None, digits: int) -> list[float] | None:
                return None if ci is None else [round(ci[0], digits), round(ci[1], digits)]

            data["trials"] = self.trials
            # a digit more than the scores: the report's table rounds these again
            data["ci95"] = {"s": pair(self.s_ci, 3), "i": pair(self.i_ci, 3), "n": pair(self.n_ci, 4), "over": self.over}
        return data


def _clip(ci: Interval | None, high: float = math.inf) -> Interval | None:
    return None if ci is None else (max(0.0, ci[0]), min(high, ci[1]))


def _percent(ci: Interval | None) -> Interval | None:
    return None if ci is None else (100.0 * ci[0], 100.0 * ci[1])


def _score_runs(records: Sequence[RunRecord]) -> Scores:
    """One trial's group: Wilson intervals for s and i, a t-interval for n over the successful runs."""
    successes = [r.interactions_until_success for r in records if r.interactions_until_success is not None]
    initial = sum(r.initial_success for r in records)
    s = 100.0 * len(successes) / len(records)
    i = 100.0 * initial / len(records)
    n = sum(successes) / len(successes) if successes else None
    return Scores(s, i, n, len(records), 1, OVER_RUNS, _percent(wilson(len(successes), len(records))),
                  _percent(wilson(initial, len(records))), _clip(t_interval([float(k) for k in successes])))


def score(records: Sequence[RunRecord]) -> Scores:
    """s, i and n of a group of runs with their intervals (an empty group scores 0 with no n).

    Runs from several trials: each score is the mean of the per-trial scores, with a t-interval over them (n over the
    trials where some run succeeded)."""
    if not records:
        return Scores(0.0, 0.0, None, 0)
    by_trial: dict[int, list[RunRecord]] = defaultdict(list)
    for record in records:
        by_trial[record.trial].append(record)
    if len(by_trial) == 1:
        return _score_runs(records)
    per_trial = [_score_runs(group) for _, group in sorted(by_trial.items())]
    s_values, i_values = [t.s for t in per_trial], [t.i for t in per_trial]
    n_values = [t.n for t in per_trial if t.n is not None]
    return Scores(statistics.fmean(s_values), statistics.fmean(i_values),
                  statistics.fmean(n_values) if n_values else None, len(records), len(per_trial), OVER_TRIALS,
                  _clip(t_interval(s_values), 100.0), _clip(t_interval(i_values), 100.0), _clip(t_interval(n_values)))


def summarize(records: Iterable[RunRecord], by_template: bool = False, intervals: bool = False) -> dict[str, dict[str, Any]]:
    """``{method: {split: scores}}``; with ``by_template`` one more level per template; with ``intervals`` each
    group's trials and 95 % intervals too (``summary.json``)."""
    groups: dict[tuple[str, ...], list[RunRecord]] = defaultdict(list)
    for record in records:
        key = (record.method, record.split, record.template) if by_template else (record.method, record.split)
        groups[key].append(record)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(groups):
        scores = score(groups[key]).to_json(intervals)
        if by_template:
            out.setdefault(key[0], {}).setdefault(key[1], {})[key[2]] = scores
        else:
            out.setdefault(key[0], {})[key[1]] = scores
    return out


def learning_curve(records: Iterable[RunRecord]) -> dict[tuple[str, str], list[tuple[int, Scores]]]:
    """Per (method, split): the scores of each run index over all templates (the paper's curves of i and n), with the
    intervals ``score`` gives them (over the templates' runs, or over the trials)."""
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
