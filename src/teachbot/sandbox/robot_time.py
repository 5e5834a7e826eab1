"""The sandbox's bookkeeping of robot motions: its two clocks, and what a kill cancelled.

The wall clock (:class:`WallClock`) stops while a robot API call runs, because motions are slow. So a
snippet's robot time is bounded separately: :class:`RobotClock` adds up the seconds spent inside the
robot's motion functions against a budget per snippet and per episode (``robot_time_per_snippet`` and
``robot_time_per_episode`` in config/sandbox.yaml), and refuses to start a motion once either is used
up. A motion in progress is never interrupted from here; instead, while one runs, :func:`time_left`
tells the skills layer how much of the budget remains, so it can clip its own per-call timeout (and
cancel the goal when that passes). Waiting for a person inside a motion function (an approval question)
is wrapped in :func:`not_counted`, so it uses no robot time.

After a kill, :func:`cancel_motions` runs the sandbox's ``on_kill`` and words what it really cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from teachbot.errors import RobotTimeBudgetExceeded

PER_SNIPPET = "robot_time_per_snippet"
PER_EPISODE = "robot_time_per_episode"


@dataclass
class _Motion:
    """The console motion call running in this thread."""

    deadline: float  # time.monotonic() when the budget runs out
    budget: str  # the config name of the budget that runs out first
    excluded: float = 0.0  # seconds inside not_counted() blocks


_CURRENT: ContextVar[_Motion | None] = ContextVar("teachbot_robot_time", default=None)


def time_left() -> tuple[float, str] | None:
    """Seconds left of the console's robot-time budget for the motion call running in this thread, and
    the budget's config name; None when no console motion call is running in it."""
    current = _CURRENT.get()
    return None if current is None else (current.deadline - time.monotonic(), current.budget)


@contextmanager
def not_counted() -> Iterator[None]:
    """Time inside this block (waiting for a person, not moving) does not count as robot time."""
    current = _CURRENT.get()
    start = time.monotonic()
    try:
        yield
    finally:
        if current is not None:
            spent = time.monotonic() - start
            current.excluded += spent
            current.deadline += spent


class WallClock:
    """A run's wall clock: everything counts except the time spent inside robot API calls."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds until the deadline (negative once past it)."""
        return self.deadline - time.monotonic()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Move the deadline on by the time spent inside the block."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.deadline += time.monotonic() - start


class RobotClock:
    """Seconds spent inside robot motion calls, against a budget per snippet and one per episode."""

    def __init__(self, per_snippet: float, per_episode: float) -> None:
        self.per_snippet, self.per_episode = per_snippet, per_episode
        self.snippet = self.episode = 0.0  # seconds used so far
        self.total = 0.0  # seconds inside motion calls since this clock was made (never reset)

    def new_snippet(self) -> None:
        """A run() starts: its own budget is full again."""
        self.snippet = 0.0

    def new_episode(self) -> None:
        """An episode starts: both budgets are full again."""
        self.snippet = self.episode = 0.0

    def left(self) -> tuple[float, str]:
        """Seconds left before a budget runs out, and the config name of the one that runs out first."""
        snippet, episode = self.per_snippet - self.snippet, self.per_episode - self.episode
        return (snippet, PER_SNIPPET) if snippet <= episode else (episode, PER_EPISODE)

    @contextmanager
    def motion(self, name: str) -> Iterator[None]:
        """Time one motion call; RobotTimeBudgetExceeded, before it starts, when a budget is used up."""
        left, budget = self.left()
        if left <= 0:
            raise RobotTimeBudgetExceeded(self.refusal(name, budget))
        start = time.monotonic()
        current = _Motion(start + left, budget)
        token = _CURRENT.set(current)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            spent = time.monotonic() - start - current.excluded
            self.snippet += spent
            self.episode += spent
            self.total += spent

    def refusal(self, name: str, budget: str) -> str:
        """The one-line error for a motion that was not started: which budget, and what to do."""
        if budget == PER_SNIPPET:
            return (f"{name}() was not started: the robot's motions in this snippet have used all of their "
                    f"{self.per_snippet:g} s ({PER_SNIPPET} in config/sandbox.yaml); go on in a new snippet")
        return (f"{name}() was not started: the robot's motions in this episode have used all of their "
                f"{self.per_episode:g} s ({PER_EPISODE} in config/sandbox.yaml); tell the person, the robot "
                "can move again in the next episode")


def cancel_motions(on_kill: Callable[[], Any] | None) -> str:
    """Run ``on_kill`` (SkillClient.cancel_all: the names of the goals whose cancel was accepted); the kill
    line's note on what it really cancelled. None or a count, from older callers, is worded as such."""
    if on_kill is None:
        return ""
    try:
        cancelled = on_kill()
    except Exception as exc:  # noqa: BLE001 - reported in the error line, the console must go on
        return f"; cancelling robot motions failed ({type(exc).__name__}: {' '.join(str(exc).splitlines())})"
    if cancelled is None:
        return "; the robot was asked to cancel its motions"
    if isinstance(cancelled, int) and not isinstance(cancelled, bool):
        return f"; the robot was asked to cancel {cancelled} motion{'' if cancelled == 1 else 's'}"
    names = [str(name) for name in cancelled]
    if not names:
        return "; no robot motion was in progress"
    return f"; cancelled the robot's {', '.join(names[:-1]) + ' and ' if len(names) > 1 else ''}{names[-1]}"
