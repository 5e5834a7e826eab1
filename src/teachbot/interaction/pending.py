"""A lesson is kept only once the person accepts the corrected task (issue 27, item 7).

The robot usually learns right after the person's complaint, before it has fixed the table: the objects at the
learning call are where the person said they should not be. So, while the learner rehearses lessons
(config/learning.yaml ``rehearsal.enabled``), the console asks it to defer (``LearnRequest.defer``): the lesson comes
back *pending*, unstored, and waits here. When the person accepts the corrected task, each pending lesson is replayed
from the episode's first scene against the table as the person accepted it (``LearningCall.keep``, teachbot.learning.
rehearsal) and stored only when it ends there; otherwise it is discarded and the robot says why in one sentence.

What counts as the person accepting the table, from the episode's transcript (motions: the profile's motion
functions; the person's words: what wait_for_trigger() or ask() returned):

- at a return of control (the robot calls ``wait_for_trigger()``): the person's last words answered the robot's
  motions (it moved something since their words before), and since those words the robot has neither moved anything
  nor called ``learn_from_interaction()``. Words the robot answered by moving or by learning were a correction (or a
  new request); the lessons keep waiting;
- at the end of the episode: the person left (the session ended, or the conversation ended quietly) after the robot
  moved something since their last words: they saw the fix and went. Where the caller knows better (``satisfied``:
  the evaluation's simulated person, who leaves both when the task is done and when they give up), its verdict decides.

Anything still pending when the episode ends otherwise (the robot stopped on errors or its round limit, the person
left with a complaint unanswered, or gave up) is discarded: the corrected task was never finished.

Several corrections in one episode leave several lessons pending (one per learning call); a later complaint does not
supersede an earlier lesson: every one is tried against the one table the person accepts, and each is kept only when
it ends there (a lesson written before the last correction usually ends elsewhere and is discarded).

Known limits (no language understanding here): a complaint the robot neither acts on nor learns from reads as
acceptance, and a new request right after a fix reads as a correction (the lessons then wait for the end of the
episode, whose table the later request changed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from teachbot.language.transcript import Entry, person_outputs
from teachbot.learning.call import REJECTED_PREFIX, LearningCall, LearnRequest
from teachbot.learning.statements import calls
from teachbot.memory.example import InteractionExample
from teachbot.simrobot.snapshot import Scene

LEARN = ("learn_from_interaction",)
WAIT = ("wait_for_trigger",)
UNFINISHED = "the corrected task was never finished"
PENDING_OUTPUT = "I will keep that lesson once the task is done right"
KEPT, REJECTED, NOT_STORED, DISCARDED = "kept", "rejected", "not stored", "unfinished"


@dataclass(frozen=True)
class PendingLesson:
    """A lesson the learner handed back pending, with the request it came from (its profile and initial scene)."""

    request: LearnRequest
    lesson: InteractionExample


def accepted_at_return(entries: Sequence[Entry], motions: Collection[str]) -> bool:
    """Whether the person's last words, as the robot hands control back now, accepted the table (module docstring)."""
    spoken = sorted(person_outputs(list(entries)))
    if len(spoken) < 2:
        return False
    before, words = spoken[-2], spoken[-1]
    after = [e for e in entries[words + 1:] if e.kind == "code"]
    return (_moved(entries[before + 1:words], motions)
            and not any(calls(e.text, (*motions, *LEARN)) for e in after))


def left_after_fix(entries: Sequence[Entry], motions: Collection[str]) -> bool:
    """Whether the robot moved something since the person's last words (they left having seen it act on them)."""
    spoken = sorted(person_outputs(list(entries)))
    return bool(spoken) and _moved(entries[spoken[-1] + 1:], motions)


def _moved(entries: Sequence[Entry], motions: Collection[str]) -> bool:
    return any(e.kind == "code" and calls(e.text, motions) for e in entries)


class PendingLessons:
    """The episode's pending lessons: tried and kept (``learner.keep``) when the person accepts, else discarded.

    ``say`` tells the person (one sentence per discarded lesson), ``log`` takes one-line notices; ``deadline``: seconds
    each keep call may take. ``counts`` adds up what became of them over the console's life (kept, rejected by the
    rehearsal, not stored for another reason, discarded unfinished)."""

    def __init__(self, learner: LearningCall, say: Callable[[str], None], log: Callable[[str], None],
                 deadline: float, grace: float = 1.0) -> None:
        self.learner, self.say, self.log = learner, say, log
        self.deadline, self.grace = deadline, grace
        self.lessons: list[PendingLesson] = []
        self.counts: Counter[str] = Counter()

    def __bool__(self) -> bool:
        return bool(self.lessons)

    def add(self, request: LearnRequest, lesson: InteractionExample) -> None:
        self.lessons.append(PendingLesson(request, lesson))

    def settle(self, accepted: Scene, now: Callable[[], float], when: str) -> None:
        """The person accepted ``accepted`` (``when``: how, for the log): each pending lesson tried and kept or not."""
        lessons, self.lessons = self.lessons, []
        for pending in lessons:
            request = replace(pending.request, accepted_scene=accepted, learned_scene=pending.request.accepted_scene,
                              deadline=now() + self.deadline, defer=False)
            episode = request.episode_id or "?"
            try:
                reply = self.learner.keep(request, pending.lesson, timeout=self.deadline + self.grace)
            except Exception as exc:  # noqa: BLE001 - a learner that is gone loses this lesson, not the episode
                self.counts[DISCARDED] += 1
                self.log(f"episode {episode}: pending lesson not kept ({when}): {type(exc).__name__}: {exc}")
                self.say(f"I could not keep that lesson: {exc}.")
                continue
            if reply.stored:
                self.counts[KEPT] += 1
                self.log(f"episode {episode}: pending lesson kept as {reply.example_id} ({when})")
            else:
                self.counts[REJECTED if reply.message.startswith(REJECTED_PREFIX) else NOT_STORED] += 1
                self.log(f"episode {episode}: pending lesson discarded ({when}): {reply.message}")
                self.say(reply.message)

    def discard(self, why: str) -> None:
        """The episode ended without the person accepting the corrected task: nothing pending is kept."""
        lessons, self.lessons = self.lessons, []
        for pending in lessons:
            self.counts[DISCARDED] += 1
            self.log(f"episode {pending.request.episode_id or '?'}: pending lesson discarded: {why}")
        if lessons:
            self.say(f"I did not keep {'that lesson' if len(lessons) == 1 else f'those {len(lessons)} lessons'}: {why}.")
