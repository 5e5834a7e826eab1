"""The learning call as the console sees it: a request with a deadline, answered by a ``Learner``.

The improvement chain runs elsewhere (the improvement node); the console waits until the deadline
and a little more, the learner stores nothing after the deadline, so a lesson is never stored after
the console has already shown that learning timed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LearnRequest:
    """``deadline``: wall-clock seconds (time.time()) after which nothing may be stored."""

    profile: str
    episode_id: str
    transcript: str
    scene_objects: tuple[str, ...]
    deadline: float


@dataclass(frozen=True)
class LearnReply:
    stored: bool
    message: str  # what the robot will do differently, or why nothing was learned


class Learner(Protocol):
    def improve(self, request: LearnRequest, timeout: float) -> LearnReply:
        """Run the chain; raise NotAvailableError when no learner runs, TimeoutError past ``timeout`` s."""
        ...
