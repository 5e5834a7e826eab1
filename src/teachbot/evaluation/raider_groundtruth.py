"""Ground truth independent of the baselines: each case's verdict checked by the simulator (issue 28 item 4).

For each case the case's world is set up from its scene and setup (:class:`~teachbot.evaluation.raider_cases.
CaseWorlds`, the simulator's own world factory) and the action is attempted through the real skills behind the
console's robot functions (teachbot.evaluation.raider_recovery.robot_functions), never through the precondition
checks of the ``precond`` baseline or the grounded tools. What the simulator then shows is the case's verdict:

- IN: the action succeeds and its effect holds in the world afterwards;
- IA: at least two of the case's candidates are objects of the world and the action succeeds on each of them
  (each reading is feasible, so only the person can say which is meant);
- IU4 (wrong state): the action's effect already holds before it is attempted (it would change nothing), the
  thing is not in the state the query asks for ("turn on" a lamp that is on, "the clean cup" that is dirty), or
  the skill refuses it for the state ("already ...");
- IU2 (obstructed) also when an action that takes a thing (grasp, pick, put_first_on_second) succeeds only by
  moving another thing (what was on top of it rode
  along or fell: it moved more than DISTURBED);
- every other issue type: the action fails, and the skill's error names the case's reason (:data:`REASONS`:
  an unknown object for IU3, a point outside the workspace for IU1, a closed container or a thing on top for
  IU2, a thing the skill cannot take for IU5, the hand for IU6).

:func:`sim_verdict` gives one case's :class:`SimVerdict`; ``agrees`` is False with ``why`` when the simulator
disagrees with the case. Pure Python, no ROS.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from teachbot.evaluation.raider_cases import CaseWorlds, RaiderCase
from teachbot.evaluation.raider_recovery import Goal, TimedSkills, _snapshot, case_skills, effect, goal_of, robot_functions
from teachbot.language.dialog import DialogChannel
from teachbot.raider.precond import ACTIONS, parse_query
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld

TAKING = ("grasp", "pick", "put_first_on_second")  # actions a thing on top of their object obstructs
DISTURBED = 0.03  # metres another thing may move during the action before it counts as moved by it

# the skill's error line -> the issue type it shows, tried in this order (the first match decides)
REASONS: tuple[tuple[str, str], ...] = (
    ("IU3", r"\bunknown (?:object|location|thing)\b|\bnot in the scene\b|\bno such\b"),
    ("IU6", r"\balready holding\b|\bholds? nothing\b|\bhand (?:is )?(?:full|empty|holds)\b|\bgripper (?:is )?(?:full|empty)\b|"
            r"\bholds '[^']+'|\bnot holding\b|\bneeds? (?:the |a )?(?:knife|sponge)\b|\bgrasp\(\.\.\.\) an object first\b"),
    ("IU4", r"\balready\b"),
    ("IU2", r"\bwhich is closed\b|\bis closed\b|\bopen\('[^']+'\) first\b|\bon top of\b|\bblock(?:ed|s|ing)\b|\bobstruct\w*|"
            r"\bin the way\b|\boccupied\b|\bcovered\b|\bis under\b|\bno (?:free )?room\b|\brests? on it\b|\bmove that first\b"),
    ("IU1", r"\boutside the workspace\b|\bout of reach\b|\bcannot reach\b|\bunreachable\b|\bno (?:ik|inverse kinematics)\b|"
            r"\btoo far\b"),
    ("IU5", r"\bcannot (?:pick|grasp|open|close|toggle|slice|wipe|place|lift|hand)\b|\bfixed to\b|\bnot (?:pickable|graspable|"
            r"openable|sliceable|togglable|cleanable)\b|\bchoose one of\b|\bhas no (?:door|switch|drawer)\b|\btoo (?:heavy|wide|big)\b"),
)


@dataclass
class SimVerdict:
    """What the simulator showed for one case: ``shown`` the issue type its outcome shows ('' when none of the
    reasons), ``attempts`` each attempted call with its outcome, ``agrees`` whether that is the case's verdict."""

    case: str
    issue_type: str
    shown: str
    agrees: bool
    why: str
    attempts: tuple[str, ...] = ()


def reason_of(message: str) -> str:
    """The issue type a skill's error line shows ('' when it names none of :data:`REASONS`)."""
    text = message.lower()
    return next((kind for kind, pattern in REASONS if re.search(pattern, text)), "")


def _call_text(action: str, args: Sequence[str]) -> str:
    return f"{action}({', '.join(map(repr, args))})"


class _Silent(DialogChannel):
    """Nobody answers: the attempt is the action alone."""

    def __init__(self) -> None:
        super().__init__(timeout=0.1)


@dataclass(frozen=True)
class Attempt:
    """One attempted call: ``ok`` it returned, ``message`` its error line, ``already`` its effect (or the state the
    query asks for) held before, ``done`` its effect holds after, ``disturbed`` the other things it moved."""

    ok: bool
    message: str = ""
    already: str = ""
    done: bool = False
    disturbed: tuple[str, ...] = ()


def wrong_state(case: RaiderCase, goal: Goal, world: HouseholdWorld | TabletopWorld, before: dict[str, Any]) -> str:
    """Why the world already is as the action would make it, or the thing is not in the state the query asks for
    ('' when neither): the effect holds before acting; 'turn on' a thing that is on; 'the clean cup' that is dirty."""
    query = case.query.lower()
    states = before["states"].get(goal.thing or (goal.args[0] if goal.args else ""), {})
    if goal.action == "toggle":
        on, off = re.search(r"\b(?:turn|switch) on\b", query), re.search(r"\b(?:turn|switch) off\b", query)
        wanted = "on" if on else "off" if off else ""
        if wanted and "on" in states and bool(states["on"]) == (wanted == "on"):
            return f"it is {wanted} already"
        return ""
    for word, flag, value in (("clean", "clean", False), ("dirty", "clean", True), ("sliced", "sliced", False),
                              ("unsliced", "sliced", True), ("whole", "sliced", True)):
        if re.search(rf"\b{word}\b", query) and flag in states and bool(states[flag]) == value:
            return f"the {goal.thing or goal.args[0]} is not {word}"
    if goal.args and effect(goal, world, before)[0]:
        return "its effect held before"
    return ""


def attempt(case: RaiderCase, worlds: CaseWorlds, goal: Goal, args: Sequence[str]) -> Attempt:
    """Load ``case``'s world and call ``goal.action`` on ``args`` through the console's robot functions over the
    real skills."""
    world = worlds.load(case)
    before = _snapshot(world)
    already = wrong_state(case, goal, world, before)
    moved_from = {o.name: o.position.copy() for o in world.objects() if not o.held}
    library = case_skills(world)
    try:
        functions: dict[str, Callable[..., Any]] = robot_functions(world, _Silent(), TimedSkills(library))
        try:
            functions[goal.action](*args)
        except Exception as exc:  # noqa: BLE001 - the skill's error is the finding
            return Attempt(False, f"{type(exc).__name__}: {exc}", already)
    finally:
        library.kin.close()
    moved = tuple(o.name for o in world.objects() if o.name in moved_from and o.name not in (*args, goal.thing)
                  and float(np.linalg.norm(o.position - moved_from[o.name])) > DISTURBED)
    return Attempt(True, "", already, effect(goal, world, before)[0], moved)


def _words(case: RaiderCase) -> list[str]:
    """The query's object words when it names nothing of the scene: 'toggle the lamp' -> ['lamp']."""
    text = re.sub(r"^\W*(?:please )?(?:[a-z_]+\(|(?:pick up|switch on|turn on|hand me|give me|[a-z]+) )", "", case.query.lower())
    return [re.sub(r"^(?:the|a|an|some) ", "", text.rstrip(")").strip())]


def sim_verdict(case: RaiderCase, worlds: CaseWorlds) -> SimVerdict:
    """Attempt ``case``'s action in its simulated world and compare what happens with the case's verdict."""
    goal = goal_of(case)
    kind = case.issue_type
    if kind == "IA":
        candidates = [g for g in case.grounding if g in case.names()]
        if len(candidates) < 2:
            return SimVerdict(case.id, kind, "", False, f"fewer than two candidates are in the world: {candidates}")
        attempts, failed = [], []
        for candidate in candidates:
            args = tuple(candidate if a == case.grounding[0] else a for a in goal.args) or (candidate,)
            each = replace(goal, args=args, thing=candidate if goal.thing == case.grounding[0] else goal.thing)
            a = attempt(case, worlds, each, args)
            attempts.append(f"{_call_text(goal.action, args)} -> {'success' if a.ok and a.done else a.message or 'no effect'}")
            if not (a.ok and a.done):
                failed.append(attempts[-1])
        return SimVerdict(case.id, kind, "IA" if not failed else reason_of(" ".join(failed)), not failed,
                          "every candidate can be done" if not failed else f"a candidate cannot be done: {failed[0]}",
                          tuple(attempts))
    if kind == "IU3":
        action, parsed = parse_query(case.query, case.world, case.names())
        args = list(parsed[: ACTIONS[action].args]) if parsed else _words(case)
    else:
        args = list(goal.args)
    a = attempt(case, worlds, goal, args)
    call = _call_text(goal.action, args)
    outcome = (("success" if a.done else "success without its effect") if a.ok else a.message) \
        + (f"; it moved {', '.join(a.disturbed)}" if a.disturbed else "")
    if a.already:
        shown = "IU4"
    elif not a.ok:
        shown = reason_of(a.message)
    elif a.disturbed and goal.action in TAKING:
        shown = "IU2"  # done only by moving what was on it or in the way
    else:
        shown = "IN" if a.done else ""
    why = f"{call} -> {outcome}" + (f"; {a.already}" if a.already else "")
    return SimVerdict(case.id, kind, shown, shown == kind, why, (f"{call} -> {outcome}",))
