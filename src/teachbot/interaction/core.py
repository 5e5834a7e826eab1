"""Console episodes one after another, as the core paper runs them: the console waits for the person.

An episode starts with the console itself executing ``wait_for_trigger()``; the first LLM call comes
only after a person has spoken. When an episode ends on errors, a looping model, the round limit or
an LLM outage, the robot says so once, with the reason and what to do, and the next episode waits for
the person again: nobody talking means no LLM call, whatever state the endpoint is in.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from teachbot.console.approval import ApprovalGate
from teachbot.console.prompt import PromptBuilder
from teachbot.console.session import QUIET_PREFIX, ConsoleSession, CorrectionStep, SessionConfig
from teachbot.errors import ConfigError
from teachbot.interaction.confirm import LessonConfirmation
from teachbot.interaction.model_trouble import SlowModelNotice, llm_failure_sentence
from teachbot.interaction.pending import (
    PENDING_OUTPUT,
    UNFINISHED,
    WAIT,
    PendingLessons,
    accepted_at_return,
    left_after_fix,
)
from teachbot.language.bounds import Bounds
from teachbot.language.budget import PromptTooLong, TokenBudget
from teachbot.language.dialog import DialogChannel
from teachbot.language.prompts import ExampleSource
from teachbot.language.registry import NotAvailableError, RobotApi
from teachbot.language.transcript import Entry, Transcript
from teachbot.learning.call import LearningCall, LearnReply, LearnRequest
from teachbot.learning.statements import calls
from teachbot.llm.base import Completion, LLMError, Model
from teachbot.llm.pricing import PriceTable, UsageMeter
from teachbot.memory.example import InteractionExample
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits
from teachbot.simrobot.snapshot import Scene, SceneObject
from teachbot.tracing import EPISODE_ID, EPISODE_SPAN, fail, set_attributes, span

ENDED = "the person ended the session"
LEARN_GRACE = 1.0  # seconds the console waits past the learning deadline (the learner stores nothing after it)


@dataclass(frozen=True)
class CoreConfig:
    """The interaction section of config/interaction.yaml plus the learning deadline."""

    session: SessionConfig = SessionConfig()
    examples_k: int = 16
    learn_deadline: float = 120.0  # seconds for the whole improvement chain
    context_tokens: int = 0  # the interaction model's context (0: no limit)
    reserve_tokens: int = 256  # kept free for its reply
    approval: str = "approval"  # the approval gate's config (config/approval.yaml, a path), or "none"
    bounds: Bounds = Bounds()  # sizes console code can make this process hold (the session gets the transcript's)
    llm_wait_notice: float = 20.0  # seconds without the model's answer before the robot says it is waiting (0: never)
    confirm_lessons: bool = False  # read a lesson back and store it only once the person agrees (teachbot.interaction.confirm)
    defer_lessons: bool = True  # ask the learner to keep a lesson pending until the person accepts the task (.pending)

    @classmethod
    def from_config(cls, interaction: dict[str, Any], learning: dict[str, Any] | None = None) -> CoreConfig:
        bounds = Bounds.from_config(interaction.get("bounds"))
        return cls(
            bounds=bounds,
            session=replace(SessionConfig.from_config(interaction.get("session", {})),
                            max_transcript_chars=bounds.max_transcript_chars),
            examples_k=int(interaction.get("examples_k", 16)),
            learn_deadline=float((learning or {}).get("deadline", 120.0)),
            context_tokens=int(interaction.get("context_tokens", 0)),
            reserve_tokens=int(interaction.get("reserve_tokens", 256)),
            approval=str(interaction.get("approval", "approval")),
            llm_wait_notice=float(interaction.get("llm_wait_notice", 20.0)),
            confirm_lessons=_flag(interaction.get("confirm_lessons", False), "interaction.confirm_lessons"),
        )


class InteractionCore:
    """The console of one robot: sandbox, prompt, models, dialog and learning, without ROS.

    ``robot_functions`` implement the profile's API (``learn_from_interaction`` is the core's own);
    ``on_entry(episode_id, entry, first_line)`` sees every transcript entry; ``say`` speaks to the
    person; ``log`` takes one-line notices; ``scene_objects`` names what the robot knows now; ``scene_state`` gives
    the objects with their poses now: the scene when an episode's first request came and the one when the person asks
    the robot to learn go with the learning request, so the learner can try the lesson (teachbot.learning.rehearsal).

    Distilled knowledge (DROC): ``knowledge`` (a ConsoleKnowledge) puts the "What I know" block in the
    prompt and gives parameterised skill functions their learned defaults; ``corrections`` (a
    CorrectionHandler) reads the person's words after the robot acted as a plan- or skill-level
    correction. An episode with corrections that did not call ``learn_from_interaction()`` ends with the
    learner distilling knowledge from it (``LearningCall.distill``), when the learner can.

    A lesson waits for the person to accept the corrected task (teachbot.interaction.pending): with ``scene_state``,
    ``defer_lessons`` and a learner that rehearses, the learning call's lesson comes back pending and is tried against
    the table the person accepts, and kept only when it ends there. ``satisfied``, when given, says whether a person
    who left accepted the table (the evaluation's simulated person; else leaving after the robot's fix is accepting).

    Confirm-before-store: while ``confirm_lessons`` is true (config, or set at run time) a lesson is read back to
    the person and stored only once they agree (teachbot.interaction.confirm); ``on_pending_lesson`` is told the
    candidate while the question is open and None once it is answered.
    """

    def __init__(
        self,
        api: RobotApi,
        robot_functions: dict[str, Callable[..., Any]],
        dialog: DialogChannel,
        model: Model,
        *,
        function_model: Model | None = None,
        examples: ExampleSource | None = None,
        config: CoreConfig | None = None,
        learner: LearningCall | None = None,
        scene_objects: Callable[[], list[str]] = list,
        limits: SandboxLimits | None = None,
        on_kill: Callable[[], Any] | None = None,
        on_entry: Callable[[str, Entry, int], None] | None = None,
        log: Callable[[str], None] = lambda _line: None,
        prices: PriceTable | None = None,
        knowledge: Any = None,
        corrections: Any = None,
        known_objects: Callable[[], list[str]] | None = None,
        on_pending_lesson: Callable[[InteractionExample | None], None] | None = None,
        node: str = "",
        scene_state: Callable[[], Sequence[SceneObject]] | None = None,
        satisfied: Callable[[], bool] | None = None,
    ) -> None:
        self.api, self.dialog, self.model, self.function_model = api, dialog, model, function_model
        self.knowledge, self.corrections = knowledge, corrections
        if knowledge is not None and corrections is not None:  # a correction starts from what the call really used
            corrections.learned = knowledge.applied_values
        self.known_objects = known_objects  # what the robot knows now without waiting (the knowledge block)
        self.node = node  # the ROS node that runs the episodes (its name on the episode spans), '' in-process
        self.config = config or CoreConfig()
        dialog.limit(self.config.bounds)
        self.learner, self.scene_objects, self.scene_state, self.log = learner, scene_objects, scene_state, log
        self.initial_scene: Scene = ()  # this episode's objects when its first request came
        self.on_entry = on_entry or (lambda _episode, _entry, _first: None)
        self.budget = TokenBudget(self.config.context_tokens, self.config.reserve_tokens)
        self.prompts = PromptBuilder.for_profile(api, examples, self.config.examples_k, self.budget,
                                                 knowledge=self._knowledge_block if knowledge is not None else None)
        self.meter = UsageMeter(prices if prices is not None else PriceTable.load())
        for role, each in (("interaction", model), ("function_generation", function_model),
                           ("correction", getattr(corrections, "model", None))):
            add = getattr(each, "add_listener", None)
            if add is not None:
                add(self._listener(role, each))
        # motions the person must approve ask in this process: the sandbox worker only holds their names. The gate
        # sits inside the learned parameters: it asks about, and checks the zone of, the call as it will run
        self.approval = ApprovalGate.load(self.config.approval, api, dialog, log)
        functions = self.approval.wrap(robot_functions) if self.approval is not None else dict(robot_functions)
        functions = knowledge.wrap(functions) if knowledge is not None else functions
        functions["learn_from_interaction"] = self.learn_from_interaction
        if scene_state is not None and "wait_for_trigger" in functions:
            functions["wait_for_trigger"] = self._first_request_scene(functions["wait_for_trigger"])
        self.sandbox = SandboxExecutor(api.bind(functions, bounds=self.config.bounds), limits or SandboxLimits(), on_kill=on_kill,
                                      robot_functions=api.motion_names)
        self.episode_id = ""
        self.llm_error: LLMError | None = None  # why the last episode that ended on an LLM failure ended
        self.session: ConsoleSession | None = None
        self.episodes = 0
        self._corrected = False  # this episode had a correction the handler recognised
        self._learned = False  # this episode called learn_from_interaction()
        self._stopping = threading.Event()
        self.confirm_lessons = self.config.confirm_lessons
        self.confirmation = LessonConfirmation(learner, dialog, on_pending=on_pending_lesson or (lambda _lesson: None),
                                               log=log) if learner is not None else None
        self.satisfied = satisfied
        self.pending = PendingLessons(learner, self._say, log, self.config.learn_deadline, LEARN_GRACE) \
            if learner is not None else None

    def _listener(self, role: str, model: Any) -> Callable[[Completion, str], None]:
        local = bool(getattr(model, "local", False))  # a server on this machine or network costs nothing

        def heard(completion: Completion, prompt: str) -> None:
            self.meter.add(role, completion, local=local)
            if role == "interaction":
                self.budget.calibrate(len(prompt), completion.prompt_tokens)
        return heard

    # ------------------------------------------------------------------ episodes
    def run(self) -> None:
        """Episodes until the person leaves or ``close()``."""
        while not self._stopping.is_set():
            if self.run_episode() == ENDED:
                return

    def run_episode(self) -> str:
        """One episode: wait for the person, then the LLM drives; returns why it ended. The episode is one trace
        (teachbot.tracing): its root span holds every LLM call, statement, skill goal and lesson of it."""
        self.episode_id = uuid.uuid4().hex[:12]
        with span(EPISODE_SPAN, {EPISODE_ID: self.episode_id, "episode.profile": self.api.profile}, node=self.node) as root:
            reason = self._episode()
            set_attributes(root, {"episode.reason": reason, "episode.rounds": self.session.rounds if self.session else 0})
            if reason != ENDED and not reason.startswith(QUIET_PREFIX):
                fail(root, reason)
        return reason

    def _episode(self) -> str:
        self.llm_error = None
        self.sandbox.reset()
        self.sandbox.new_episode()  # the robot-time budget per episode starts afresh
        self.initial_scene = ()
        self.meter.reset()
        self._corrected = self._learned = False
        if self.knowledge is not None:
            self.knowledge.forget()
        notice = self.config.llm_wait_notice
        self.session = ConsoleSession(
            self.sandbox, SlowModelNotice(self.model, notice, self._say), self.prompts,
            function_model=SlowModelNotice(self.function_model, notice, self._say) if self.function_model else None,
            config=self.config.session, on_entry=self._entry,
            corrections=self._correct if self.corrections is not None else None, episode_id=self.episode_id,
        )
        try:
            reason = self.session.run(should_stop=self._stopping.is_set)
        except LLMError as exc:
            self.llm_error = exc
            reason = f"LLM unavailable: {exc}"
            if not self._stopping.is_set():  # a call abandoned by close() is no failure to tell the person
                self._say(llm_failure_sentence(exc))
        except PromptTooLong as exc:
            reason = f"prompt too long: {exc}"
            self._say(f"This conversation no longer fits my language model's context, so I stopped: {exc}.")
        except Exception as exc:  # noqa: BLE001 - a bug ends the episode, not the robot; said once, then we wait
            reason = f"{type(exc).__name__}: {exc}"
            self._say(f"I have a problem and stopped: {reason}. Tell me again what to do.")
        else:
            if reason != ENDED and not reason.startswith(QUIET_PREFIX):
                self._say(f"I stopped: {reason}. Please tell me again what to do.")
        self._settle_at_end(reason)
        if self._corrected and not self._learned and not self._stopping.is_set():  # closing: no new LLM work
            self._distill()
        self.episodes += 1
        usage = self.meter.summary_line()
        self.log(f"episode {self.episode_id} ended: {reason}; {usage}")
        return reason

    def _entry(self, entry: Entry, first_line: int) -> None:
        if self.pending and entry.kind == "code" and calls(entry.text, WAIT):
            self._settle_at_return()
        self.on_entry(self.episode_id, entry, first_line)

    def _settle_at_return(self) -> None:
        """The robot hands control back: pending lessons are tried when the person's last words accepted the table."""
        session = self.session
        if session is not None and accepted_at_return(session.transcript.entries, self.api.motion_names):
            self.pending.settle(self._scene_now(), time.time, "the person's words after the fix accepted the table")

    def _settle_at_end(self, reason: str) -> None:
        """The episode is over: pending lessons are tried when the person left after the fix, else discarded."""
        if not self.pending:
            return
        left = reason == ENDED or reason.startswith(QUIET_PREFIX)
        if not left:
            self.pending.discard(f"{UNFINISHED} (the robot stopped: {reason})")
        elif self.satisfied is not None and not self.satisfied():
            self.pending.discard(f"{UNFINISHED} (the person left unsatisfied)")
        elif self.session is not None and left_after_fix(self.session.transcript.entries, self.api.motion_names):
            self.pending.settle(self._scene_now(), time.time, "the person left after the fix")
        else:
            self.pending.discard(f"{UNFINISHED} (the person left with their last correction unanswered)")

    def _say(self, text: str) -> None:
        """Speak even when the dialog is closed (the person may still be listening on the topic)."""
        self.dialog.on_say(self.dialog.fit(text))

    def _first_request_scene(self, wait_for_trigger: Callable[[], dict]) -> Callable[[], dict]:
        """wait_for_trigger() that notes the scene when the episode's first request comes (the lesson's start)."""
        def waited() -> dict:
            heard = wait_for_trigger()
            if not self.initial_scene:
                self.initial_scene = self._scene_now()
            return heard
        return waited

    def _scene_now(self) -> Scene:
        if self.scene_state is None:
            return ()
        try:
            return tuple(self.scene_state())
        except Exception as exc:  # noqa: BLE001 - no object list: the lesson is stored untried, the episode goes on
            self.log(f"episode {self.episode_id}: no scene for the lesson's rehearsal: {type(exc).__name__}: {exc}")
            return ()

    # ------------------------------------------------------------------ knowledge
    def _objects_now(self) -> list[str]:
        try:
            return list(self.scene_objects())
        except Exception:  # noqa: BLE001 - no object list yet: the block goes by the words alone
            return []

    def _knowledge_block(self, instructions: list[str]) -> str:
        if not instructions:
            return ""
        objects = self.known_objects() if self.known_objects is not None else self._objects_now()
        return self.knowledge.block(instructions, objects)

    def _correct(self, utterance: str, transcript: Transcript) -> CorrectionStep | None:
        """The correction handler on the person's words after the robot acted (see ConsoleSession)."""
        handler = self.corrections
        if not handler.acted_since_last_words(transcript):
            return None  # the robot did nothing since the person last spoke: the LLM reads the words as they are
        try:
            correction = handler.handle(utterance, transcript)
        except Exception as exc:  # noqa: BLE001 - the handler falls back itself; a bug must not end the episode
            self.log(f"the correction handler failed ({type(exc).__name__}: {exc}); the words go to the LLM as they are")
            return None
        if not correction.is_correction or correction.level == "none":
            return None
        self._corrected = True
        self.log(f"episode {self.episode_id}: {correction.note}")
        return CorrectionStep(correction.note, correction.statement if correction.level == "skill" else "")

    def _distill(self) -> None:
        """The end of a task with corrections: the learner distils knowledge from it (when it can)."""
        distill = getattr(self.learner, "distill", None)
        if distill is None or self.session is None:
            return
        request = self._learn_request(self.config.learn_deadline)
        try:
            reply = distill(request, timeout=self.config.learn_deadline + LEARN_GRACE)
        except Exception as exc:  # noqa: BLE001 - distilling is a bonus: log and go on
            self.log(f"episode {self.episode_id}: no knowledge distilled: {type(exc).__name__}: {exc}")
            return
        self.log(f"episode {self.episode_id}: knowledge {'distilled' if reply.stored else 'not distilled'}: {reply.message}")
        if reply.stored and self.knowledge is not None:
            self.knowledge.forget()

    def _learn_request(self, deadline: float) -> LearnRequest:
        # what the robot knows now: waiting for an object list here (a stack without perception) held every learning
        # call for the list's whole timeout before the improvement node saw it (the trace showed 5 s)
        objects = tuple(self.known_objects() if self.known_objects is not None else self._objects_now())
        session = self.session
        return LearnRequest(self.api.profile, self.episode_id, session.transcript.render() if session else "",
                            objects, time.time() + deadline, initial_scene=self.initial_scene,
                            accepted_scene=self._scene_now() if self.initial_scene else ())

    # ------------------------------------------------------------------ learning
    def learn_from_interaction(self) -> str | None:
        """Send this episode's transcript to the learner; say what will be done differently (or, with
        ``confirm_lessons``, read the lesson back and store it only once the person agrees)."""
        if self.learner is None:
            raise NotAvailableError("learn_from_interaction() is not available: no improvement node is configured")
        deadline = self.config.learn_deadline
        confirm = self.confirm_lessons and self.confirmation is not None
        request = self._learn_request(deadline)
        defer = self.config.defer_lessons and not confirm and bool(request.initial_scene) and self.pending is not None
        request = replace(request, store=not confirm, defer=defer)
        self._learned = True
        reply = self._improve(request)
        if confirm and not reply.stored and reply.lesson is not None:
            return self.confirmation.run(request, reply.lesson, deadline + LEARN_GRACE, self._improve)
        if reply.pending and reply.lesson is not None and self.pending is not None:
            self.pending.add(request, reply.lesson)
            self.dialog.say(self.dialog.fit(f"Got it. {PENDING_OUTPUT}: {_lower_first(reply.message)}"))
            return PENDING_OUTPUT
        if not reply.stored:
            return f"nothing learned: {reply.message}"
        if self.knowledge is not None:
            self.knowledge.forget()
        self.dialog.say(self.dialog.fit(f"Got it. Next time: {_lower_first(reply.message)}"))
        return None

    def _improve(self, request: LearnRequest) -> LearnReply:
        """One learner call with a fresh deadline (an edit of the person's comes long after the first call)."""
        deadline = self.config.learn_deadline
        try:
            reply = self.learner.improve(replace(request, deadline=time.time() + deadline), timeout=deadline + LEARN_GRACE)
        except TimeoutError:
            raise TimeoutError(f"learning took longer than {deadline:g} s and was cancelled; nothing was stored") from None
        if (reply.stored or reply.knowledge) and self.knowledge is not None:  # a new lesson or new knowledge to retrieve
            self.knowledge.forget()
        return reply

    def close(self) -> None:
        self._stopping.set()
        self.dialog.close()

    def shutdown(self) -> None:
        """Release the sandbox worker (after the episode thread stopped)."""
        self.sandbox.close()


def _lower_first(text: str) -> str:
    return text[0].lower() + text[1:] if text else ""


def _flag(value: Any, key: str) -> bool:
    """A YAML boolean of the config (a quoted "true" is refused, as a typo would be)."""
    if not isinstance(value, bool):

        raise ConfigError(f"config/interaction.yaml {key}: expected true or false, got {value!r}")
    return value
