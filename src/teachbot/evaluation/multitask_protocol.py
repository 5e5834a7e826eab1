"""The multi-task benchmark's protocols: what the simulated person says, in which chats, and the robot's
skills that stop when the person interrupts (teachbot.evaluation.multitask).

``paper`` (the default), the multi-task memory paper's protocol over its five tasks in their definition
order (sort, arrangement, pointing, recipe, tower):

- ``intervened`` (the default mode; the paper's Table IV): one chat. Round 1: the person asks for the
  first task; when it has done half of its required actions the person interrupts and asks for the next
  task ("Stop that for now. First ..."), and so on to the last, which is interrupted too. Round 2: the
  person asks to finish each task in the same order, and after each asks the environment and the task
  probe. The chat is reset only at the end.
- ``consecutive`` (Table III): one chat; each task asked for, done, then its probes, back to back.
- ``standalone`` (Table II): each task in a chat of its own, then its probes.

``pairs`` (a named deviation, off by default): two tasks per case (the config's ``pairs``), only the first
interrupted, its probes asked before it is resumed, every conversation a new console with
``conversations: separate``.

Interruptions are enforced (:class:`SkillRecorder`): at the interruption point the robot's next call
fails with "the person is talking to you"; from then until the person asks to go on with the task, any
action touching its objects is refused and counted as a violation of it. Putting down what the hand held
at the interruption, where it was taken from or on a place's surface (not into or onto another object), is
allowed: the robot stops with its hand empty. On the robot the same interruption is the spoken stop of
teachbot.interaction.spoken_stop (the goals in flight cancelled, robot calls refused until the person is heard).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teachbot.evaluation.multitask_judge import Probe, TaskObjects
from teachbot.interaction.spoken_stop import INTERRUPTED
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.skills.household_signatures import HOUSEHOLD_TARGETS

PROTOCOLS = ("paper", "pairs")
MODES = ("standalone", "consecutive", "intervened")
REQUESTS = ("start", "switch", "resume")  # lines that ask for a task
PROBES = ("environment", "task")
INTERRUPT = INTERRUPTED  # the same words as the robot's spoken stop (teachbot.interaction.spoken_stop)
STOPPED = "the person stopped the {task} task: do nothing more of it until they ask you to go on with it"


@dataclass(frozen=True)
class TaskScript:
    """What the person says about one task."""

    name: str
    start: str
    switch: str
    resume: str
    environment_probe: Probe
    task_probe: Probe


@dataclass(frozen=True)
class Line:
    """One thing the person says: ``kind`` a request (start, switch, resume) or a probe (environment, task)
    about ``task``."""

    kind: str
    task: str
    text: str


def _request(script: TaskScript, kind: str) -> Line:
    return Line(kind, script.name, getattr(script, kind))


def _probes(script: TaskScript) -> list[Line]:
    return [Line(k, script.name, getattr(script, f"{k}_probe").ask) for k in PROBES]


def paper_chats(mode: str, scripts: Sequence[TaskScript]) -> list[list[Line]]:
    """The person's lines per chat of the paper's protocol over ``scripts`` in their order."""
    if mode == "standalone":
        return [[_request(s, "start"), *_probes(s)] for s in scripts]
    if mode == "consecutive":
        return [[line for s in scripts for line in (_request(s, "start"), *_probes(s))]]
    first = [_request(s, "start" if i == 0 else "switch") for i, s in enumerate(scripts)]
    second = [line for s in scripts for line in (_request(s, "resume"), *_probes(s))]
    return [first + second]


def pair_chats(mode: str, a: TaskScript, b: TaskScript | None, same: bool) -> list[list[Line]]:
    """The person's lines per conversation of a case of the ``pairs`` deviation (``same``: one conversation)."""
    if mode == "standalone":
        out = [[_request(a, "start"), *_probes(a)]]
    elif mode == "consecutive":
        assert b is not None
        out = [[_request(a, "start")], [_request(b, "start"), *_probes(a)]]
    else:
        assert b is not None
        out = [[_request(a, "start"), _request(b, "switch")], [*_probes(a), _request(a, "resume")]]
    return [[line for chat in out for line in chat]] if same else out


def interruption_points(mode: str, protocol: str, tasks: Sequence[str], need: Mapping[str, int], fraction: float) -> dict[str, int]:
    """Task -> after how many of its actions the person interrupts it (the paper: every task, at half its
    required actions; pairs: the first task only)."""
    if mode != "intervened":
        return {}
    chosen = tasks if protocol == "paper" else tasks[:1]
    return {t: math.ceil(need[t] * fraction) for t in chosen}


# ---------------------------------------------------------------------------------------- the person
class ScriptedPerson(DialogChannel):
    """The person of one case: says the lines of the current chat in order, and keeps what the robot says
    after each probe. ``on_line`` hears each line as it is said (the recorder notes requests, the judge
    the truth of probes)."""

    def __init__(self) -> None:
        super().__init__(timeout=5.0)
        self.lines: list[Line] = []
        self.answers: dict[tuple[str, str], list[str]] = {}  # (task, probe kind) -> what the robot said
        self._probe: tuple[str, str] | None = None
        self.heard: list[str] = []
        self.on_line: Callable[[Line], None] = lambda _line: None

    def wait_for_trigger(self) -> dict:
        self._probe = None
        if not self.lines:
            raise SessionEnded("the person is done for now")
        line = self.lines.pop(0)
        if line.kind in PROBES:
            self._probe = (line.task, line.kind)
            self.answers[self._probe] = []
        self.on_line(line)
        self.heard.append(line.text)
        return {"type": "dialog", "text": line.text}

    def ask(self, question: str) -> dict:
        self.say(question)
        return {"type": "dialog", "text": "Please go on with what I asked."}

    def say(self, text: str) -> None:
        if self._probe is not None:
            self.answers[self._probe].append(str(text))


# ---------------------------------------------------------------------------------------- the robot's skills
@dataclass
class Call:
    """One robot call: its skill and fields, whether it ran and succeeded, the task asked for then, and
    whether it put back what the hand held at an interruption."""

    name: str
    fields: dict[str, Any]
    ok: bool
    task: str
    put_back: bool = False
    refused: bool = False


@dataclass
class SkillRecorder:
    """The household skills in-process, judged action by action: the task asked for now (``active``), the
    interruption points (``interrupt_at``: task -> its actions), the tasks paused by an interruption or by
    the person asking for another, each task's actions and violations, and what the arm pointed at (the
    world's ground truth)."""

    world: Any
    tasks: Mapping[str, TaskObjects]
    interrupt_at: dict[str, int] = field(default_factory=dict)
    inner: Any = None
    active: str = ""
    paused: set[str] = field(default_factory=set)
    interrupted: dict[str, bool] = field(default_factory=dict)
    task_actions: dict[str, int] = field(default_factory=dict)
    violations: dict[str, list[str]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    pointed: list[str] = field(default_factory=list)
    taken_from: dict[str, set[str]] = field(default_factory=dict)  # object -> where it was when last grasped

    def __post_init__(self) -> None:
        if self.inner is None:
            from teachbot.simrobot.direct import DirectSkills  # deferred: pybullet

            self.inner = DirectSkills(self.world.skills())
        for task in self.tasks:
            self.interrupted.setdefault(task, False)
            self.task_actions.setdefault(task, 0)
            self.violations.setdefault(task, [])

    @property
    def actions(self) -> int:
        """Successful robot actions, all tasks together."""
        return sum(1 for c in self.calls if c.ok)

    def hear(self, line: Any) -> None:
        """The person said ``line``: a switch or resume pauses the task asked for until then; a request
        makes its task the one asked for (a resume lets it go on)."""
        if line.kind not in REQUESTS:
            return
        if line.kind in ("switch", "resume") and self.active and self.active != line.task:
            self.paused.add(self.active)
        self.paused.discard(line.task)
        self.active = line.task

    def owner(self, name: str) -> str:
        """The task whose scene holds the object ``name`` ('' for none)."""
        return next((t for t, o in self.tasks.items() if name in o.scene), "")

    def touched(self, name: str, fields: Mapping[str, Any], held: str) -> list[str]:
        """The objects a call acts on: its target if an object, and what the hand holds when it puts or gives."""
        out = []
        target = fields.get(HOUSEHOLD_TARGETS.get(name, ""), "")
        if name in ("place_object", "handover_object_to_human") and held:
            out.append(held)
        if isinstance(target, str) and target and self.owner(target):
            out.append(target)
        return out

    def where(self, name: str) -> set[str]:
        """Where ``name`` is: what it rests on or in, and what that rests on, down to the place."""
        truth = self.world.truth()
        out: set[str] = set()
        at = truth.get(name, "")
        while at and at not in out:
            out.add(at)
            at = truth.get(at, "")
        return out

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> Any:
        active = self.active
        at = self.interrupt_at.get(active)
        if at is not None and not self.interrupted.get(active) and self.task_actions.get(active, 0) >= at:
            self.interrupted[active] = True
            self.paused.add(active)
            raise RuntimeError(INTERRUPT)
        held = self.world.world.held_object()
        target = fields.get(HOUSEHOLD_TARGETS.get(name, ""), "")
        put_back = bool(name == "place_object" and held and self.owner(held) in self.paused and isinstance(target, str)
                        and (target in self.taken_from.get(held, set()) or not self.owner(target)))
        touched = [] if put_back else self.touched(name, fields, held)
        stopped = sorted({self.owner(o) for o in touched} & self.paused)
        if stopped:
            for task in stopped:
                self.violations[task].append(f"{name}({target or held!r}) after the {task} task was stopped")
            self.calls.append(Call(name, dict(fields), False, active, refused=True))
            raise RuntimeError(STOPPED.format(task=stopped[0]))
        if active:
            wrong = [o for o in touched if o not in self.tasks[active].allowed]
            self.violations[active] += [f"{name} touched {o!r}, not an object of the {active} task" for o in wrong]
        before = self.where(target) if name == "grasp" and isinstance(target, str) else set()
        outcome = self.inner.call(name, timeout, **fields)
        ok = bool(outcome.success)
        self.calls.append(Call(name, dict(fields), ok, active, put_back))
        if ok and name == "grasp" and before:
            self.taken_from[str(target)] = before
        if ok and active and not put_back:
            self.task_actions[active] = self.task_actions.get(active, 0) + 1
        if name == "point_at" and ok:
            self.pointed.append(self.world.pointed_at())
        return outcome
