"""A lesson is tried before it is kept: its console statements replayed in a copy of the simulated world.

The copy is a fresh tabletop world (teachbot.simrobot.factory.world_from_scene) holding the scene as it stood when
the episode's first request came (``LearnRequest.initial_scene``); the lesson's statements run one by one in the
console's sandbox (teachbot.sandbox.executor.SandboxExecutor) against the robot functions of the request's profile
bound to the copy's in-process skills, in simulated time. The lesson is kept when every statement runs without an
error and the objects end where the person accepted them (``LearnRequest.accepted_scene``: the state when they
asked the robot to learn, after their corrections), each within ``tolerance`` metres and in or on the same thing;
otherwise it is rejected with one sentence for the person that says where the replay left what.

When the robot learns before it has carried out the person's correction (the usual order: the complaint, then
``learn_from_interaction()`` at once, then the fix), the objects at the learning call are where the person said they
should not be, not an accepted end. The console therefore defers the comparison (``LearnRequest.defer``): the lesson
waits, unstored, until the person accepts the corrected task (teachbot.interaction.pending), and is then tried against
the table as they accepted it (``accepted=True``). A request that does not defer is compared only when the transcript
shows the robot moving again after the person answered its first motion (:func:`corrected_before_learning`); else
the replay only has to run without errors (the verdict's reason says the end was not compared). An object the
robot's mistake moved and its fix left where it was (between the first request and the learning call, not after:
``LearnRequest.learned_scene``) is a leftover the person let stand: a lesson may also leave it where it began.

The dialog never blocks in a replay: the first ``wait_for_trigger()`` returns the request the lesson recorded and
any later one ends the replay (control back to the person: the lesson is over); ``ask()`` returns the answer the
lesson recorded right after it, and ends the replay when it holds none; ``say()`` does nothing;
``learn_from_interaction()`` does nothing; ``check_action()`` answers 'unknown' (nothing checks in a replay).

Not tried (the lesson is stored as before, and the reason logged): rehearsal off in config/learning.yaml, a profile
without a rehearsal world (the household: its doors, drawers, base and held things are not rebuilt from an object
list), a request without the two scenes, or no time left before the learning deadline.
"""

from __future__ import annotations

import ast
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript, person_outputs, utterance_text
from teachbot.learning.call import REJECTED_PREFIX, LearnRequest
from teachbot.learning.statements import calls
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits
from teachbot.simrobot.direct import DirectSkills
from teachbot.simrobot.factory import make_skills, world_from_scene
from teachbot.simrobot.snapshot import SceneObject, where
from teachbot.world.scene import TabletopConfig

KEPT, REJECTED, NOT_TRIED = "kept", "rejected", "not tried"
# the robot functions of a profile over (a skill caller, the object positions by name, the dialog)
RobotFunctions = Callable[[Any, Callable[[], dict[str, list[float]]], DialogChannel], dict[str, Callable[..., Any]]]


@dataclass(frozen=True)
class RehearsalConfig:
    """config/learning.yaml ``rehearsal``: ``enabled`` tries every improved lesson before storing it; ``tolerance``
    (metres) is how far from its accepted place an object may end."""

    enabled: bool = True
    tolerance: float = 0.05

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> RehearsalConfig:
        raw = raw or {}
        enabled = raw.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ValueError(f"config/learning.yaml rehearsal.enabled: expected true or false, got {enabled!r}")
        tolerance = float(raw.get("tolerance", 0.05))
        if not tolerance > 0:
            raise ValueError(f"config/learning.yaml rehearsal.tolerance: expected metres above 0, got {tolerance!r}")
        return cls(enabled, tolerance)


@dataclass(frozen=True)
class Rehearsal:
    """What trying a lesson found: ``verdict`` kept, rejected or not tried; ``reason`` the sentence for the person
    (rejected) or why it was not tried; ``seconds`` of wall clock it took."""

    verdict: str
    reason: str = ""
    seconds: float = 0.0

    @property
    def rejected(self) -> bool:
        return self.verdict == REJECTED


class ReplayEnded(Exception):
    """The lesson gave control back to the person (or asked what it holds no answer to): the replay is over."""


class ReplayDialog(DialogChannel):
    """The person during a replay: the lesson's own recorded words, never a wait."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded: dict | None = None  # the dialog dict the lesson shows after the statement being run
        self.triggers = 0
        self.ended = ""  # why the replay ended before the lesson's last statement

    def wait_for_trigger(self) -> dict:
        self.triggers += 1
        if self.triggers == 1 and self.recorded is not None:
            answer, self.recorded = self.recorded, None
            return answer
        self.ended = "the lesson gave control back to the person"
        raise ReplayEnded(self.ended)

    def ask(self, question: str) -> dict:
        if self.recorded is None:
            self.ended = f"the lesson asked {question!r} and holds no answer"
            raise ReplayEnded(self.ended)
        answer, self.recorded = self.recorded, None
        return answer

    def say(self, text: str) -> None:
        """Nobody listens to a replay."""


class Rehearser:
    """Tries lessons of the profiles in ``functions`` (profile name -> its robot functions over a skill caller, an
    object list and a dialog; the tabletop's are teachbot.console.tabletop_api.TabletopRobot's)."""

    def __init__(self, functions: Mapping[str, RobotFunctions], config: RehearsalConfig | None = None, *,
                 table: TabletopConfig | None = None, limits: SandboxLimits | None = None) -> None:
        self.functions, self.config = dict(functions), config or RehearsalConfig()
        self.table = table or TabletopConfig.load()
        self.limits = limits or SandboxLimits()
        self._apis: dict[str, RobotApi] = {}

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def rehearse(self, request: LearnRequest, lesson: str, until: float | None = None, *, accepted: bool = False) -> Rehearsal:
        """Try ``lesson`` (a console transcript) from the request's initial scene; ``until``: time.monotonic() after
        which it gives up (not tried). ``accepted``: the request's ``accepted_scene`` is the table the person accepted
        (compared whatever the transcript shows)."""
        started = time.monotonic()
        why = self.why_untried(request)
        if why:
            return Rehearsal(NOT_TRIED, why)
        try:
            world = world_from_scene(request.initial_scene, table=self.table)
        except ValueError as exc:
            return Rehearsal(NOT_TRIED, f"no copy of the scene: {exc}")
        try:
            verdict, reason = self._replay(world, request, lesson, until, accepted)
        finally:
            world.close()
        return Rehearsal(verdict, reason, round(time.monotonic() - started, 3))

    def why_untried(self, request: LearnRequest, *, deferred: bool = False) -> str:
        """Why a lesson of ``request`` would not be tried ('' when it would); ``deferred``: the accepted scene comes
        later (only the initial one is needed now)."""
        if not self.config.enabled:
            return "rehearsal is off (config/learning.yaml rehearsal.enabled)"
        if request.profile not in self.functions:
            return (f"the {request.profile} profile has no rehearsal world (only "
                    f"{', '.join(sorted(self.functions)) or 'none'}: a kitchen's doors, drawers, base and held things "
                    "are not rebuilt from an object list)")
        if not request.initial_scene or not (deferred or request.accepted_scene):
            return "the request carries no initial or accepted scene"
        return ""

    def _api(self, profile: str) -> RobotApi:
        if profile not in self._apis:
            self._apis[profile] = RobotApi.load(profile)
        return self._apis[profile]

    def _replay(self, world: Any, request: LearnRequest, lesson: str, until: float | None,
                accepted: bool) -> tuple[str, str]:
        api = self._api(request.profile)
        dialog = ReplayDialog()
        objects = lambda: {o.name: [float(v) for v in o.position] for o in world.objects()}  # noqa: E731
        functions = self.functions[request.profile](DirectSkills(make_skills(world)), objects, dialog)
        functions = {**functions, "learn_from_interaction": lambda: None,
                     "check_action": lambda action: {"final_response": "unknown", "explanation": "not checked in a rehearsal"}}
        entries = Transcript.parse(lesson).entries
        with SandboxExecutor(api.bind({k: v for k, v in functions.items() if k in api.names}), self.limits,
                             robot_functions=api.motion_names) as sandbox:
            for index, entry in enumerate(entries):
                if entry.kind != "code":
                    continue
                if until is not None and time.monotonic() > until:
                    return NOT_TRIED, "no time was left to finish the rehearsal before the learning deadline"
                following = entries[index + 1] if index + 1 < len(entries) else None
                dialog.recorded = _dialog_dict(following.text) if following is not None and following.kind == "output" else None
                result = sandbox.run(entry.text)
                if dialog.ended:
                    break
                if result.error:
                    statement = entry.text.split("\n")[0]
                    return REJECTED, f"{REJECTED_PREFIX}replayed from the start, {statement} failed ({result.error})."
        if not accepted and not corrected_before_learning(request.transcript, api.motion_names):
            return KEPT, ("replayed from the start without errors; the end was not compared: the robot learned before it "
                          "carried out the correction")
        end = tuple(SceneObject(o.name, o.category, o.color, tuple(float(v) for v in o.position[:3]), 0.0)  # type: ignore[arg-type]
                    for o in world.objects())
        held = world.held_object() or ""
        return self._compare(end, request.accepted_scene, held, _leftovers(request, self.config.tolerance))

    def _same(self, got: SceneObject, end: Sequence[SceneObject], want: SceneObject, among: Sequence[SceneObject]) -> bool:
        """Whether ``got`` (in ``end``) is where ``want`` is (in ``among``): within tolerance, in or on the same thing."""
        gap = math.hypot(got.position[0] - want.position[0], got.position[1] - want.position[1])
        there, here = where(want, among, self.table), where(got, end, self.table)
        if gap > self.config.tolerance:
            return False
        # in a bowl or not must agree; resting on another block or on the table at the same spot is a stack's order
        return _inside(there) == _inside(here)


    def _compare(self, end: Sequence[SceneObject], accepted: Sequence[SceneObject], held: str,
                 leftovers: Mapping[str, SceneObject] | None = None) -> tuple[str, str]:
        """Kept when every object the person accepted ends within tolerance and in or on the same thing; one of
        ``leftovers`` (the mistake moved it, the fix did not: name -> where it began) may also end where it began."""
        ended = {o.name: o for o in end}
        initial = list((leftovers or {}).values())
        wrong: list[tuple[SceneObject, SceneObject]] = []
        for want in accepted:
            got = ended.get(want.name)
            if got is None:
                continue  # something perception found later: the replay knows nothing of it
            if got.name == held or not self._same(got, end, want, accepted):
                began = (leftovers or {}).get(want.name)
                if got.name == held or began is None or not self._same(got, end, began, initial):
                    wrong.append((got, want))
        if not wrong:
            return KEPT, "replayed from the start, it left every object where the person accepted it"
        got, want = wrong[0]
        there, here = where(want, accepted, self.table), where(got, end, self.table)
        if got.name == held:
            here = "in the gripper"
        elif here == there:
            gap = math.hypot(got.position[0] - want.position[0], got.position[1] - want.position[1])
            here = f"{gap * 100:.0f} cm away from"
            there = f"where you accepted it ({there})"
        more = f" (and {len(wrong) - 1} more object{'s' if len(wrong) > 2 else ''} elsewhere)" if len(wrong) > 1 else ""
        if here.endswith("away from"):
            return REJECTED, f"{REJECTED_PREFIX}replayed from the start it left the {got.name} {here} {there}{more}."
        return REJECTED, (f"{REJECTED_PREFIX}replayed from the start it left the {got.name} {_bare(here)}, "
                          f"not {_bare(there)} where you accepted it{more}.")


def _leftovers(request: LearnRequest, tolerance: float) -> dict[str, SceneObject]:
    """Objects the robot's mistake moved and its fix left there (name -> where it began): moved between the first
    request and the learning call (``learned_scene``), not between it and the person's acceptance. The person let
    them stand, so a lesson that leaves them where they began is not held to where the mistake put them."""
    began = {o.name: o for o in request.initial_scene}
    learned = {o.name: o for o in request.learned_scene}
    out = {}
    for now in request.accepted_scene:
        first, then = began.get(now.name), learned.get(now.name)
        if first is not None and then is not None and _gap(first, then) > tolerance and _gap(then, now) <= tolerance:
            out[now.name] = first
    return out


def _gap(a: SceneObject, b: SceneObject) -> float:
    return math.hypot(a.position[0] - b.position[0], a.position[1] - b.position[1])


def corrected_before_learning(transcript: str, motions: Collection[str]) -> bool:
    """Whether the episode's objects at the learning call are the corrected ones: the robot moved, the person spoke,
    and the robot moved again before ``learn_from_interaction()`` (its correction carried out, so the person saw it)."""
    entries = Transcript.parse(transcript).entries
    spoken = person_outputs(entries)
    phase = 0  # 0: no motion yet; 1: moved; 2: the person answered a motion
    for index, entry in enumerate(entries):
        if entry.kind == "code" and calls(entry.text, ("learn_from_interaction",)):
            break
        if index in spoken and phase == 1:
            phase = 2
        elif entry.kind == "code" and calls(entry.text, motions):
            if phase == 2:
                return True
            phase = max(phase, 1)
    return False


def _inside(words: str) -> str:
    """The thing a where() description says the object is in ('' when it is on something, or on the table)."""
    return words if words.startswith("in ") else ""


def _bare(words: str) -> str:
    """'on the table near the left side' reads 'near the left side' in a sentence about the table."""
    return words.removeprefix("on the table ")


def _dialog_dict(text: str) -> dict | None:
    """The dialog dict a console output shows ({'type': 'dialog', 'text': ...}), else None."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, dict) and utterance_text(text) == value.get("text"):
        return value
    return None
