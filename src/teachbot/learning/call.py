"""The learning call as the console sees it: a request with a deadline, answered by a ``LearningCall``
(in this process :class:`teachbot.learning.learner.Learner`; over ROS the interaction manager's client of the
improvement node, which runs the same ``Learner``).

The improvement chain runs elsewhere (the improvement node); the console waits until the deadline
and a little more, the learner stores nothing after the deadline, so a lesson is never stored after
the console has already shown that learning timed out.

Confirm-before-store (teachbot.interaction.confirm): a request with ``store=False`` makes the learner
store nothing and answer with the candidate lesson instead; the console reads its one sentence back to
the person and stores it through :meth:`LearningCall.store` only once they agree. A request that carries the
person's own ``improvement`` sentence (their edit) skips the model's problem and how-to-do-better answers.

A lesson is kept only once the person accepts the corrected task (teachbot.interaction.pending): a request with
``defer`` whose lesson the learner would rehearse (teachbot.learning.rehearsal) stores nothing and is answered
``pending`` with the lesson; the console holds it and, when the person accepts the table, hands it to
:meth:`LearningCall.keep` with the scene they accepted, which replays it and stores it only when it ends there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from teachbot.memory.example import InteractionExample
from teachbot.simrobot.snapshot import Scene

REJECTED_PREFIX = "I did not keep that lesson: "  # how the sentence for a lesson the rehearsal rejected begins


@dataclass(frozen=True)
class LearnRequest:
    """``deadline``: wall-clock seconds (time.time()) after which nothing may be stored.

    ``store``: False asks for the candidate lesson only (nothing stored); ``problem`` and ``improvement``,
    when given, are the lesson's problem and the person's own sentence of how to do better, used instead of
    asking the model for them. ``initial_scene``: the objects when the episode's first request came;
    ``accepted_scene``: where they were when the person asked the robot to learn (after the corrections); the
    lesson is tried from the first and must end at the second (teachbot.learning.rehearsal). Empty: not known.
    ``defer``: the caller will say when the person accepted the corrected task; a lesson to rehearse then comes back
    pending (:attr:`LearnReply.pending`) instead of being tried against ``accepted_scene`` and stored now; kept later
    (:meth:`LearningCall.keep`), the request's ``accepted_scene`` is the table the person accepted and ``learned_scene``
    the one at the learning call (objects the robot's mistake moved and its fix did not may end where they began)."""

    profile: str
    episode_id: str
    transcript: str
    scene_objects: tuple[str, ...]
    deadline: float
    store: bool = True
    problem: str = ""
    improvement: str = ""
    initial_scene: Scene = ()
    accepted_scene: Scene = ()
    defer: bool = False
    learned_scene: Scene = ()


@dataclass(frozen=True)
class LearnReply:
    stored: bool
    message: str  # what the robot will do differently, or why nothing was learned
    lesson: InteractionExample | None = None  # the lesson stored, or the candidate of a store=False request
    example_id: str = ""  # its id in memory when stored
    knowledge: tuple[str, ...] = ()  # the knowledge distilled and stored by the same call (DROC)
    pending: bool = False  # a ``defer`` request's lesson, kept only once the person accepts the task (LearningCall.keep)


class LearningCall(Protocol):
    def improve(self, request: LearnRequest, timeout: float) -> LearnReply:
        """Run the chain; raise NotAvailableError when no learner runs, TimeoutError past ``timeout`` s."""
        ...

    def store(self, lesson: InteractionExample, timeout: float) -> LearnReply:
        """Store a lesson the person confirmed (memory's add); TimeoutError past ``timeout`` s."""
        ...

    def keep(self, request: LearnRequest, lesson: InteractionExample, timeout: float) -> LearnReply:
        """A pending lesson of ``request`` (its ``accepted_scene`` now the table the person accepted): replay it from
        ``initial_scene`` and store it only when it ends there (the reply's message: the sentence why not); TimeoutError
        past ``timeout`` s."""
        ...
