"""The one learner: learn_from_interaction() from a transcript to a stored lesson and distilled knowledge.

The improvement chain (:class:`~teachbot.learning.improver.Improver`) turns the transcript into a lesson;
the learner gives it its provenance (:class:`~teachbot.memory.example.InteractionExample`), stores it
while at least ``store_margin`` seconds are left before the request's deadline (a caller that gave up at
its deadline never finds a lesson stored behind its back), or hands it back unstored as the candidate
of a confirm-before-store request. An improved lesson is first tried in a copy of the simulated world
(:class:`~teachbot.learning.rehearsal.Rehearser`, when given) and stored only when the replay ends where the person
accepted the episode's end; a rejected one is discarded with the reason as the reply's one sentence. When the caller
defers (``LearnRequest.defer``: the person has not accepted the corrected task yet), such a lesson is handed back
pending and tried by :meth:`Learner.keep` once the person accepts it (teachbot.interaction.pending). Then, and
instead of the chain for :meth:`Learner.distill`, the knowledge extractor (DROC) distils typed entries from the
corrections and stores them the same way.

Where lessons and knowledge go is given: the improvement node stores through the memory node's
services (teachbot.nodes.improvement_node), the evaluations and the soak bench into their own
stores in this process (:class:`MemoryLessons`, :class:`StoreKnowledge`). Everything else is this class.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from teachbot.config import load_yaml, resolve_config
from teachbot.errors import MemoryStoreError
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.knowledge.extractor import KnowledgeExtractor
from teachbot.language.registry import NotAvailableError
from teachbot.language.transcript import Transcript
from teachbot.learning.call import LearnReply, LearnRequest
from teachbot.learning.improver import Improver, Lesson, deadline_message
from teachbot.learning.rehearsal import NOT_TRIED, Rehearsal, Rehearser
from teachbot.memory.example import InteractionExample, utc_now_iso
from teachbot.tracing import set_attributes, span

STORE_WAIT = 0.5  # seconds to wait for a knowledge store to show up before distilling nothing
NO_STORE = "nothing distilled: no memory node serves memory/add_knowledge"
ImageOf = Callable[[str], "tuple[list[float], str] | None"]


def learning_config(config: str = "learning") -> dict[str, Any]:
    """The ``learning`` section of config/learning.yaml (or of the file ``config`` names): mode, deadline, store_margin."""
    return dict(load_yaml(resolve_config(config))["learning"])


class LessonSink(Protocol):
    """Where a lesson is stored."""

    def add(self, example: InteractionExample) -> str:
        """Store ``example``; its id. MemoryStoreError or NotAvailableError (the message says why) when it cannot."""
        ...


class KnowledgeSink(Protocol):
    """Where distilled knowledge is stored."""

    def ready(self, wait: float) -> bool:
        """Whether something keeps knowledge (finding out within ``wait`` seconds)."""
        ...

    def add(self, entries: Sequence[KnowledgeEntry]) -> list[str]:
        """Store ``entries``; their ids. MemoryStoreError (the message says why) when they cannot be stored."""
        ...


class MemoryLessons:
    """Lessons into an episodic memory (or any store with ``add(example) -> id``) in this process."""

    def __init__(self, memory: Any) -> None:
        self.memory = memory

    def add(self, example: InteractionExample) -> str:
        return str(self.memory.add(example))


class StoreKnowledge:
    """Knowledge into a knowledge store in this process (``add(entry) -> id``)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def ready(self, wait: float) -> bool:
        return True

    def add(self, entries: Sequence[KnowledgeEntry]) -> list[str]:
        return [str(self.store.add(entry)) for entry in entries]


@dataclass(frozen=True)
class Learned:
    """What one learning call did: the chain's ``lesson`` (None for distillation alone), the example built
    from it (stored, or the candidate), and the knowledge stored."""

    stored: bool
    message: str
    lesson: Lesson | None = None
    example: InteractionExample | None = None
    example_id: str = ""
    knowledge: tuple[str, ...] = ()
    knowledge_ids: tuple[str, ...] = ()
    rehearsal: Rehearsal | None = None  # what trying the lesson found (None: not a lesson to try, or no rehearser)
    pending: bool = False  # the example waits for the person to accept the corrected task (a ``defer`` request)

    def reply(self) -> LearnReply:
        """The console's view of it."""
        return LearnReply(self.stored, self.message, self.example, self.example_id, self.knowledge, self.pending)


class Learner:
    """learn_from_interaction() behind the console's learning call (teachbot.learning.call.LearningCall).

    ``improver(profile)`` and ``extractor(profile)`` give the chain and the knowledge extractor of a robot API
    profile; ``lessons`` and ``knowledge`` say where their results go (None: nowhere, so a lesson is not
    stored and nothing is distilled). ``images(until)`` gives, per request, the function that finds an
    object's crop vector and its embedder before ``until`` (time.monotonic()). ``distill`` False (with
    ``why_not_distill``) turns distillation off. ``cancelled`` stops a running chain before its next model call.
    ``rehearsal`` tries an improved lesson before it is stored (None: stored untried); ``rehearsals`` counts its
    verdicts (kept, rejected, not tried) over the learner's life.
    """

    def __init__(self, improver: Callable[[str], Improver], lessons: LessonSink | None, *,
                 extractor: Callable[[str], KnowledgeExtractor] | None = None, knowledge: KnowledgeSink | None = None,
                 images: Callable[[float], ImageOf | None] | None = None, store_margin: float = 2.0, robot_id: str = "",
                 distill: bool = True, why_not_distill: str = "", cancelled: Callable[[], bool] | None = None,
                 rehearsal: Rehearser | None = None, log: Callable[[str], None] = lambda line: None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.improver, self.lessons = improver, lessons
        self.extractor, self.knowledge, self.images = extractor, knowledge, images
        self.store_margin, self.robot_id = store_margin, robot_id
        self.distilling = distill and extractor is not None
        self.why_not_distill = why_not_distill or "no knowledge extractor is configured"
        self.cancelled, self.rehearsal = cancelled, rehearsal
        self.rehearsals: Counter[str] = Counter()
        self.log, self.warn = log, warn or log
        self.distilled: list[KnowledgeEntry] = []  # every entry stored, oldest first
        self._lock = threading.Lock()  # one chain at a time; a request queued behind another keeps its own deadline

    @classmethod
    def in_process(cls, improver: Improver, memory: Any = None, *, extractor: KnowledgeExtractor | None = None,
                   knowledge: Any = None, image_of: ImageOf | None = None, store_margin: float | None = None,
                   rehearsal: Rehearser | None = None, log: Callable[[str], None] = lambda line: None) -> Learner:
        """The learner of the evaluations and the soak bench: lessons into ``memory`` (an episodic memory; None:
        none kept), knowledge from ``extractor`` into ``knowledge`` (a KnowledgeStore), the store margin of
        config/learning.yaml unless given, lessons tried by ``rehearsal`` first (None: stored untried)."""
        margin = float(learning_config().get("store_margin", 2.0)) if store_margin is None else store_margin
        return cls(lambda _profile: improver, MemoryLessons(memory) if memory is not None else None,
                   extractor=(lambda _profile: extractor) if extractor is not None else None,
                   knowledge=StoreKnowledge(knowledge) if knowledge is not None else None,
                   images=(lambda _until: image_of) if image_of is not None else None, store_margin=margin,
                   rehearsal=rehearsal, log=log)

    # ------------------------------------------------------------------ the console's learning call
    def improve(self, request: LearnRequest, timeout: float) -> LearnReply:
        """The improvement chain, the lesson stored (or handed back as the candidate), then distillation."""
        return self.learn(request).reply()

    def store(self, lesson: InteractionExample, timeout: float) -> LearnReply:
        """Store a lesson the person confirmed."""
        if self.lessons is None:
            return LearnReply(False, "the lesson could not be stored: this learner keeps no lessons")
        try:
            example_id = self.lessons.add(lesson)
        except (MemoryStoreError, NotAvailableError) as exc:
            return LearnReply(False, f"the lesson could not be stored: {exc}")
        self.log(f"lesson stored as {example_id} after the person confirmed it")
        return LearnReply(True, lesson.improvement, lesson.replace(id=example_id), example_id)

    def distill(self, request: LearnRequest, timeout: float) -> LearnReply:
        """Knowledge only (the end of a task with corrections); ``stored`` says whether any was stored."""
        return self.distill_only(request).reply()

    def keep(self, request: LearnRequest, lesson: InteractionExample, timeout: float) -> LearnReply:
        """A pending lesson, now that the person accepted the corrected task (see :meth:`keep_pending`)."""
        return self.keep_pending(request, lesson).reply()

    # ------------------------------------------------------------------ with everything it did
    def learn(self, request: LearnRequest) -> Learned:
        """One learning call; an exception of the chain (an LLM outage) goes to the caller. It is a ``learning``
        span: each step of the chain a ``learning.step`` with its verdict, then what was stored or why not."""
        with span("learning", {"learning.episode_id": request.episode_id, "learning.candidate": not request.store}) as current:
            learned = self._learn(request)
            set_attributes(current, _outcome(learned))
            return learned

    def _learn(self, request: LearnRequest) -> Learned:
        seconds = request.deadline - time.time()
        if seconds <= 0:
            return self._refused(deadline_message(seconds))
        deadline = time.monotonic() + seconds
        with self._lock:
            lesson = self.improver(request.profile).learn(
                request.transcript, scene_objects=list(request.scene_objects), deadline=deadline, cancelled=self.cancelled,
                problem=request.problem, improvement=request.improvement)
        for note in lesson.notes:
            self.log(f"episode {request.episode_id or '?'}: {note}")
        if self._defers(request, lesson):  # tried once the person accepts the corrected task (keep_pending)
            learned = self._pending(request, lesson)
        else:
            tried = self._rehearse(request, lesson, deadline)
            learned = replace(self._store_lesson(request, lesson, deadline, seconds, tried), rehearsal=tried)
        # after the chain, whatever its verdict: the corrections may still teach facts (not for a candidate: it stores nothing)
        if request.store and self._can_distill(deadline):
            texts, ids, _ = self._distill(request, deadline)
            learned = replace(learned, knowledge=texts, knowledge_ids=ids)
            if ids:
                self.log(f"episode {request.episode_id or '?'}: {len(ids)} knowledge entr{'y' if len(ids) == 1 else 'ies'} stored")
        return learned

    def keep_pending(self, request: LearnRequest, lesson: InteractionExample) -> Learned:
        """A lesson handed back pending, now that the person accepted the corrected task: replayed from the request's
        ``initial_scene``, stored only when it ends at its ``accepted_scene`` (the table the person accepted) and while
        the store margin is left before the request's deadline (a ``learning.keep`` span)."""
        with span("learning.keep", {"learning.episode_id": request.episode_id}) as current:
            learned = self._keep(request, lesson)
            set_attributes(current, _outcome(learned))
            return learned

    def _keep(self, request: LearnRequest, lesson: InteractionExample) -> Learned:
        seconds = request.deadline - time.time()
        if seconds <= 0:
            return self._refused(deadline_message(seconds))
        deadline = time.monotonic() + seconds
        tried = self._try(request, lesson.transcript, deadline, accepted=True)
        if tried is not None and tried.rejected:
            return Learned(False, self._refused(tried.reason, "lesson discarded: rehearsal rejected: ").message,
                           rehearsal=tried)
        return replace(self._store(request, lesson, deadline, seconds, lesson.improvement or lesson.problem),
                       rehearsal=tried)

    def distill_only(self, request: LearnRequest) -> Learned:
        """Distillation without the chain (a ``learning.distill`` span)."""
        with span("learning.distill", {"learning.episode_id": request.episode_id}) as current:
            learned = self._distill_only(request)
            set_attributes(current, _outcome(learned))
            return learned

    def _distill_only(self, request: LearnRequest) -> Learned:
        seconds = request.deadline - time.time()
        if seconds <= 0:
            return self._refused(deadline_message(seconds))
        if not self.distilling:
            return self._refused(f"nothing distilled: {self.why_not_distill}")
        if seconds < self.store_margin:  # no time left to store what it would distil
            return self._refused(deadline_message(seconds))
        texts, ids, message = self._distill(request, time.monotonic() + seconds)
        return Learned(bool(ids), message, knowledge=texts, knowledge_ids=ids)

    def _refused(self, message: str, prefix: str = "") -> Learned:
        self.log(prefix + message)
        return Learned(False, message)

    def _defers(self, request: LearnRequest, lesson: Lesson) -> bool:
        """Whether ``lesson`` waits for the person to accept the corrected task: the caller defers, and the rehearsal
        would try it (on, the profile's world, the initial scene known, an improved lesson)."""
        return (request.defer and request.store and lesson.ok and self.rehearsal is not None
                and self.improver(request.profile).mode == "improve" and not self.rehearsal.why_untried(request, deferred=True))

    def _pending(self, request: LearnRequest, lesson: Lesson) -> Learned:
        """The lesson handed back unstored, to be tried and kept once the person accepts the corrected task."""
        self.log(f"episode {request.episode_id or '?'}: lesson pending until the person accepts the corrected task: "
                 f"{lesson.reason}")
        return Learned(False, lesson.reason, lesson, self._example(request, lesson), pending=True)

    def _rehearse(self, request: LearnRequest, lesson: Lesson, deadline: float) -> Rehearsal | None:
        """Try an improved lesson in a copy of the world (teachbot.learning.rehearsal); None when there is none to try."""
        if not lesson.ok:
            return None
        return self._try(request, lesson.transcript, deadline)

    def _try(self, request: LearnRequest, transcript: str, deadline: float, accepted: bool = False) -> Rehearsal | None:
        """Replay ``transcript`` (``accepted``: against the table the person accepted) and count the verdict."""
        if self.rehearsal is None:
            return None
        mode = self.improver(request.profile).mode
        try:
            tried = (Rehearsal(NOT_TRIED, f"learning mode {mode} stores the interaction as it was") if mode != "improve"
                     else self.rehearsal.rehearse(request, transcript, until=deadline - self.store_margin, accepted=accepted))
        except Exception as exc:  # noqa: BLE001 - a broken rehearsal must not lose the lesson: it is stored untried
            tried = Rehearsal(NOT_TRIED, f"the rehearsal failed: {type(exc).__name__}: {exc}")
            self.warn(f"episode {request.episode_id or '?'}: {tried.reason}")
        self.rehearsals[tried.verdict] += 1
        self.log(f"episode {request.episode_id or '?'}: rehearsal {tried.verdict} ({tried.seconds:.2f} s): {tried.reason}")
        return tried

    def _store_lesson(self, request: LearnRequest, lesson: Lesson, deadline: float, seconds: float,
                      tried: Rehearsal | None = None) -> Learned:
        if not lesson.ok:
            return replace(self._refused(lesson.reason, "lesson discarded: "), lesson=lesson)
        if tried is not None and tried.rejected:
            return replace(self._refused(tried.reason, "lesson discarded: rehearsal rejected: "), lesson=lesson)
        example = self._example(request, lesson)
        if not request.store:  # the caller reads it back to the person and stores it once they agree
            self.log(f"episode {request.episode_id or '?'}: candidate lesson for the person to confirm: {lesson.reason}")
            return Learned(False, lesson.reason, lesson, example)
        return replace(self._store(request, example, deadline, seconds, lesson.reason), lesson=lesson)

    def _example(self, request: LearnRequest, lesson: Lesson) -> InteractionExample:
        """The lesson with its provenance, as memory keeps it."""
        return InteractionExample(
            profile=request.profile, source="learned", transcript=lesson.transcript,
            instructions=tuple(Transcript.parse(lesson.transcript).instructions()), problem=lesson.problem,
            improvement=lesson.improvement, scope=lesson.scope, episode_id=request.episode_id,
            author_model=self.improver(request.profile).model.name, created=utc_now_iso())

    def _store(self, request: LearnRequest, example: InteractionExample, deadline: float, seconds: float,
               reason: str) -> Learned:
        """Store ``example`` while the store margin is left before ``deadline``; ``reason``: what it teaches."""
        left = deadline - time.monotonic()
        if left < self.store_margin:  # the caller gives up at the deadline: store nothing it would not hear of
            message = deadline_message(seconds) if left <= 0 else (
                f"the learning call reached its deadline of {seconds:.1f} s (under {self.store_margin:g} s left to store "
                "the lesson); nothing was stored")
            return replace(self._refused(message), example=example)
        if self.lessons is None:
            return self._refused("the lesson could not be stored: this learner keeps no lessons")
        try:
            example_id = self.lessons.add(example)
        except (MemoryStoreError, NotAvailableError) as exc:
            message = f"the lesson could not be stored: {exc}"
            self.warn(message)
            return Learned(False, message, example=example)
        self.log(f"episode {request.episode_id or '?'}: lesson stored as {example_id}: {reason}")
        return Learned(True, reason, example=example.replace(id=example_id), example_id=example_id)

    # ------------------------------------------------------------------ distillation
    def _can_distill(self, deadline: float) -> bool:
        return self.distilling and deadline - time.monotonic() >= self.store_margin

    def _distill(self, request: LearnRequest, deadline: float) -> tuple[tuple[str, ...], tuple[str, ...], str]:
        """Distil and store; (texts, ids, what happened). Entries come while the store margin is still ahead."""
        until = deadline - self.store_margin
        if self.knowledge is None or not self.knowledge.ready(max(0.0, min(STORE_WAIT, until - time.monotonic()))):
            self.log(NO_STORE)
            return (), (), NO_STORE
        assert self.extractor is not None  # distilling is on only with one
        try:
            with self._lock:
                entries = self.extractor(request.profile).extract(
                    request.transcript, scene_objects=list(request.scene_objects), episode_id=request.episode_id,
                    robot_id=self.robot_id, image_of=self.images(until) if self.images is not None else None, deadline=until)
        except Exception as exc:  # noqa: BLE001 - a bad transcript or config is an answer, not a crash
            message = f"nothing distilled: {type(exc).__name__}: {exc}"
            self.warn(message)
            return (), (), message
        if not entries:
            return (), (), "nothing distilled: the interaction holds no correction to remember"
        if deadline - time.monotonic() < self.store_margin:
            message = f"{len(entries)} knowledge entries distilled too late (under {self.store_margin:g} s to the deadline); nothing stored"
            self.log(message)
            return (), (), message
        try:
            ids = tuple(self.knowledge.add(entries))
        except MemoryStoreError as exc:
            message = f"the knowledge could not be stored: {exc}"
            self.warn(message)
            return (), (), message
        self.distilled += entries
        texts = tuple(e.text for e in entries)
        return texts, ids, "learned: " + " ".join(texts)


def _outcome(learned: Learned) -> dict[str, object]:
    """A learning span's result: stored, a candidate or discarded; the lesson id or the reason; the knowledge ids."""
    verdict = ("stored" if learned.stored else "pending" if learned.pending
               else "candidate" if learned.example is not None and not learned.example_id else "discarded")
    tried = learned.rehearsal
    return {"learning.verdict": verdict, "learning.lesson_id": learned.example_id or None, "learning.reason": learned.message,
            "learning.knowledge_ids": list(learned.knowledge_ids),
            "learning.rehearsal": tried.verdict if tried is not None else None,
            "learning.rehearsal_reason": tried.reason if tried is not None else None,
            "learning.rehearsal_s": tried.seconds if tried is not None else None}
