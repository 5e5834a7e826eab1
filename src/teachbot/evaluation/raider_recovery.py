"""Recov_Plan: does a recovery plan work in the simulation?

For a case with an issue and a check's verdict, :class:`~teachbot.raider.recovery.RecoveryPlanner`
writes a plan; it runs in the console sandbox against the simulated robot of the case's world (its
scene and setup loaded by :class:`~teachbot.evaluation.raider_cases.CaseWorlds`), with a simulated person who
answers ``ask()`` from the ground truth, and is judged by the world afterwards. The rule per issue type:

- IA, IU2, IU6 (and IN): the robot can fix it (ask which one, move what obstructs or open the
  container, free or fetch the hand), so the plan counts when the original action's effect holds in the
  world afterwards: grasp/pick: the object held; place/put_first_on_second: the object on its target;
  place_object: what the hand held (or, with an empty hand, something) rests at the place;
  handover_object_to_human: the thing is with the person; open/close: the door or drawer open/closed;
  toggle: switched; slice: sliced; wipe: clean. For IA the action is the one with the candidate the
  person named (the expected grounding's first).
- IU1 (out of reach): the robot cannot fix it alone, but the person can, as in the paper (Section 5.2: the robot
  asks the person to place the medicine closer): a plan that asks the person to bring the thing closer (an
  ``ask()`` naming the out-of-reach thing with "closer", "nearer" or "within reach"; the simulated person then
  moves it within reach) counts when the action's effect then holds in the world. A plan that tells instead is
  judged as the next types are.
- IU3 (not present), IU4 (wrong state: already done, or the thing is not as asked) and IU5 (wrong properties):
  nothing the robot or the person does makes the action right, so the plan counts when it tells the person so:
  what its ``say()`` and ``ask()`` texts say together states the case's reason in the words Expl accepts
  (teachbot.evaluation.raider_explain.states_reason: "out of reach", "not present", "already open", "not
  pickable", ...) and names every key fact of the case (the objects), and no physical call retries the
  action, i.e. the action's function on the action's own arguments (the grounding; for IU3 the query's words),
  or any call of that function when the query names no argument (a category, a handover). Substitutes the
  person did not ask for are allowed. "I cannot do that." is no recovery.
- IA also needs the plan to have asked: a question that asks which, or names two of the candidates; a plan
  that picks one itself is a guess, not a recovery.

Either way a plan that raises is a failure with its error line. The person is
:class:`~teachbot.evaluation.raider_person.SimulatedPerson` (never told the verdict). The planner is told what
the hand holds (the paper's "robot holding") and, in the contexts of the paper's Table 2 with a scene, the
scene description of the visual-obs baseline. The tabletop console has only put_first_on_second, so its
recovery API adds the benchmark's ``pick`` and ``place``. Physical calls are time-limited (wall clock, per
call and per plan). Pure Python, no ROS.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from teachbot.console.household_api import HouseholdRobot
from teachbot.console.issue_guard import IssueGuard
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.errors import ErrorCode, TeachbotError
from teachbot.evaluation.raider_cases import CaseWorlds, RaiderCase, fact_score, mentions
from teachbot.evaluation.raider_explain import states_reason
from teachbot.evaluation.raider_person import SimulatedPerson
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import ApiFunction, RobotApi
from teachbot.raider.agent import CheckResult
from teachbot.raider.precond import ACTIONS, parse_query
from teachbot.raider.recovery import RecoveryPlanner
from teachbot.raider.tools import normalise
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.factory import make_skills
from teachbot.skills.household_signatures import HOUSEHOLD_SKILLS
from teachbot.skills.interfaces import CancelToken
from teachbot.skills.library import SkillLibrary, SkillOutcome
from teachbot.world.scene import TabletopConfig

TELL_TYPES = ("IU1", "IU3", "IU4", "IU5")  # the robot cannot fix these alone; IA, IU2, IU6 (and IN) it can; IU1 the person can
CALL_LIMIT = 60.0  # wall seconds per physical robot call
PLAN_LIMIT = 180.0  # wall seconds of physical robot calls per plan
HANDOVER_AFTER = 0.3  # seconds until the simulated person takes a handed-over object
TABLETOP_ACTIONS = (
    ApiFunction("pick", "(obj_name: str) -> str", "Pick up a block and hold it; returns 'success'."),
    ApiFunction("place", "(obj_name: str, target: str | list[float]) -> str",
                "Put down the held obj_name on the named object or position [x, y]; returns 'success'."),
)
PHYSICAL = {"household": tuple(HOUSEHOLD_SKILLS), "tabletop": ("put_first_on_second", "pick", "place")}


@dataclass
class RecoveryOutcome:
    """How one case's recovery plan did: ``error`` is its error line ('' when it ran through)."""

    case: str
    plan: str = ""
    ran: bool = False
    error: str = ""
    asked: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    brought: list[str] = field(default_factory=list)
    acted: list[str] = field(default_factory=list)
    success: bool = False
    why: str = ""


@dataclass(frozen=True)
class Goal:
    """The original action as judged: ``args`` its grounded arguments, ``thing`` what ends up placed or
    handed over ('' when unknown), ``named`` the arguments a retry would repeat (empty: any call)."""

    action: str
    args: tuple[str, ...]
    thing: str
    named: tuple[str, ...]


def goal_of(case: RaiderCase) -> Goal:
    """The case's action with its arguments from the ground truth (IA: the first candidate chosen)."""
    action, parsed = parse_query(case.query, case.world, case.names())
    if not action:
        raise ValueError(f"case {case.id}: no action of the {case.world} robot in {case.query!r}")
    n = ACTIONS[action].args
    if case.issue_type == "IA":
        known = set(case.names())
        args = [*parsed[:n], *[""] * (n - len(parsed))]
        slot = next((i for i, a in enumerate(args) if a not in known), 0)
        args = [case.grounding[0] if i == slot else a for i, a in enumerate(args)] if n else [case.grounding[0]]
    elif case.issue_type == "IU3":
        args = parsed[:n]
    else:
        args = list(case.grounding[: max(n, 1)])
    if action == "place_object":
        thing = case.setup.held
    elif action == "handover_object_to_human":
        thing, args = (args[0] if args else case.setup.held), []
    else:
        thing = args[0] if args else ""
    return Goal(action, tuple(args), thing, tuple(normalise(a) for a in args if a))


def recovery_api(world: str) -> RobotApi:
    """The API a recovery plan is written against: the console's, plus pick and place on the tabletop."""
    api = RobotApi.load(world)
    return api if world == "household" else RobotApi(api.profile, api.functions + TABLETOP_ACTIONS)


def planner_for(planner: RecoveryPlanner, world: str) -> RecoveryPlanner:
    """``planner``, or one with its model and ``world``'s recovery API when it was made for another."""
    api = recovery_api(world)
    return planner if planner.api.names == api.names else RecoveryPlanner(planner.model, api, planner.context)


class TimedSkills:
    """The skill caller of the plan: each call cancelled past its wall-clock limit (CALL_LIMIT, and
    PLAN_LIMIT for all of them); the person takes a handed-over object after HANDOVER_AFTER s."""

    def __init__(self, library: SkillLibrary, call_limit: float = CALL_LIMIT, plan_limit: float = PLAN_LIMIT) -> None:
        self.library, self.call_limit, self.left = library, call_limit, plan_limit

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> SkillOutcome:
        if name == "handover_object_to_human":
            fields.setdefault("timeout", HANDOVER_AFTER)
        limit = min(self.call_limit, timeout, self.left)
        if limit <= 0:
            return SkillOutcome(False, ErrorCode.TIMEOUT, f"{name}: the plan's time for robot motions is spent", 0.0)
        start = time.monotonic()
        token = CancelToken(poll=lambda: time.monotonic() - start > limit)
        outcome = self.library.run(name, cancel=token, **fields)
        self.left -= time.monotonic() - start
        if not outcome.success and token.cancelled:
            outcome = replace(outcome, code=ErrorCode.TIMEOUT, message=f"{name} ran past its time limit of {limit:.0f} s")
        return outcome


def _target_fields(table: TabletopConfig, objects: Sequence[str], target: Any) -> dict[str, Any]:
    if isinstance(target, str):
        return {"target_point": list(table.named_points[target])} if target in table.named_points and target not in objects \
            else {"target_name": target}
    if isinstance(target, (list, tuple)) and len(target) >= 2:
        return {"target_point": [float(target[0]), float(target[1])]}
    raise ValueError("the target must be an object name, a corner/side name or [x, y]")


def robot_functions(world: HouseholdWorld | TabletopWorld, person: DialogChannel,
                    skills: TimedSkills) -> dict[str, Callable[..., Any]]:
    """The console's robot functions over the direct skills of ``world`` (tabletop: with pick and place)."""
    if isinstance(world, HouseholdWorld):
        return HouseholdRobot(skills, world.object_names, world.thing_states, person, world.layout).functions()
    table = TabletopConfig.load()
    robot = TabletopRobot(skills, lambda: {o.name: o.position for o in world.objects()}, person, table)

    def run(skill: str, **fields: Any) -> str:
        result = skills.call(skill, **fields)
        if not result.success:
            raise RuntimeError(result.message)
        return "success"

    def pick(obj_name: str) -> str:
        return run("pick", object_name=obj_name)

    def place(obj_name: str, target: str | list[float]) -> str:
        held = world.held_object()
        if held != obj_name:
            raise RuntimeError(f"the gripper holds {repr(held) if held else 'nothing'}, not {obj_name!r}; pick({obj_name!r}) first")
        return run("place", **_target_fields(table, robot.get_obj_names(), target))

    pick.__qualname__, place.__qualname__ = "pick", "place"  # as error lines name them
    return robot.functions() | {"pick": pick, "place": place}


def case_skills(world: HouseholdWorld | TabletopWorld) -> SkillLibrary:
    """The direct skills of a case's world, knowing what its setup put in the hand (close its kin when done)."""
    library = make_skills(world)
    library.held = world.held_object()  # the case's setup put it in the hand
    return library


def _snapshot(world: HouseholdWorld | TabletopWorld) -> dict[str, Any]:
    return {"where": {o.name: (getattr(o, "place", ""), o.supported_by) for o in world.objects()},
            "states": world.thing_states() if isinstance(world, HouseholdWorld) else {}}


def effect(goal: Goal, world: HouseholdWorld | TabletopWorld, before: dict[str, Any]) -> tuple[bool, str]:
    """Whether the original action's effect holds in ``world`` now, and why (or why not)."""
    objects = {o.name: o for o in world.objects()}
    held = world.held_object()
    a, args = goal.action, goal.args
    if a in ("grasp", "pick"):
        return held == args[0], f"the hand holds {held or 'nothing'}" + ("" if held == args[0] else f", not {args[0]}")
    if a in ("place", "put_first_on_second"):
        o = objects.get(args[0])
        ok = o is not None and not o.held and o.supported_by == args[1]
        return ok, f"{args[0]} is {'on' if ok else 'not on'} {args[1]}"
    if a in ("place_object", "handover_object_to_human"):
        where = args[0] if a == "place_object" else next(p.name for p in world.layout.places.values() if p.hand is not None)
        moved = [goal.thing] if goal.thing else [n for n, w in before["where"].items() if where not in w]
        done = [n for n in moved if n in objects and not objects[n].held and where in (objects[n].place, objects[n].supported_by)]
        return bool(done), f"{', '.join(done)} at the {where}" if done else f"{goal.thing or 'nothing new'} is not at the {where}"
    states = world.thing_states().get(args[0], {})
    flag, want = {"open": ("open", True), "close": ("open", False), "slice": ("sliced", True), "wipe": ("clean", True)}.get(
        a, ("on", not before["states"].get(args[0], {}).get("on", False)))
    ok = bool(states.get(flag, False)) == want
    return ok, f"{args[0]}: {flag} is {bool(states.get(flag, False))}" + ("" if ok else f", wanted {want}")


def asks_which(case: RaiderCase, question: str) -> bool:
    """``question`` lets the person choose: it asks which, or names two of the candidates."""
    return bool(re.search(r"\bwhich\b", question.lower())) or sum(any(mentions(question, a) for a in f) for f in case.facts) >= 2


def judge(case: RaiderCase, goal: Goal, error: str, person: SimulatedPerson, calls: Sequence[tuple[str, tuple[Any, ...]]],
          world: HouseholdWorld | TabletopWorld, before: dict[str, Any]) -> tuple[bool, str]:
    """The per-issue-type rule of this module's docstring: (success, why)."""
    if error:
        return False, f"the plan failed: {error}"
    if case.issue_type == "IU1" and person.brought:
        ok, why = effect(goal, world, before)
        return ok, f"the person brought the {' and the '.join(person.brought)} closer; {why}"
    if case.issue_type in TELL_TYPES:
        retried = [f"{name}({', '.join(map(repr, args))})" for name, args in calls if name == goal.action
                   and (not goal.named or tuple(normalise(str(x)) for x in args[: len(goal.named)]) == goal.named)]
        if retried:
            return False, f"the robot cannot do it ({case.issue_type}), yet the plan tried: {retried[0]}"
        spoken = " ".join(s.strip() for s in [*person.said, *person.asked] if s.strip())
        if not spoken:
            return False, f"the robot cannot do it ({case.issue_type}) and the plan did not say() so"
        if not states_reason(case, spoken):
            return False, f"what the plan said does not give the reason ({case.issue_type}): {spoken!r}"
        if fact_score(case, spoken) < 1.0:
            return False, f"what the plan said does not name {' and '.join(f[0] for f in case.facts)}: {spoken!r}"
        return True, f"the robot told the person why it cannot: {spoken!r}"
    if case.issue_type == "IA" and not any(asks_which(case, q) for q in person.asked):
        return False, f"the plan chose without asking which one (asked: {person.asked or 'nothing'})"
    return effect(goal, world, before)


def evaluate_recovery(case: RaiderCase, result: CheckResult, planner: RecoveryPlanner, worlds: CaseWorlds,
                      scene: str = "") -> RecoveryOutcome:
    """Ask ``planner`` for the plan of ``case`` after ``result`` (told what the hand holds, and ``scene``, the scene
    description, in its contexts with a scene); run it in the case's world; judge it."""
    outcome = RecoveryOutcome(case.id)
    try:
        goal = goal_of(case)
        outcome.plan = planner_for(planner, case.world).plan(case.query, result, held=case.setup.held, scene=scene)
    except (TeachbotError, ValueError) as exc:
        outcome.error = line = f"{type(exc).__name__}: {exc}"
        outcome.why = f"no plan: {line}"
        return outcome
    before = _snapshot(world := worlds.load(case))
    person = SimulatedPerson(case, world, goal)
    library = case_skills(world)
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def recording(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, (*args, *kwargs.values())))
            outcome.acted.append(f"{name}({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])}) -> failed")
            value = fn(*args, **kwargs)  # a failure leaves the call marked failed
            outcome.acted[-1] = outcome.acted[-1].removesuffix(" -> failed")
            return value
        return call

    try:
        functions = robot_functions(world, person, TimedSkills(library))
        functions = {n: recording(n, f) if n in PHYSICAL[case.world] else f for n, f in functions.items()}
        functions["check_action"] = IssueGuard(None).check_action
        api = recovery_api(case.world)
        with SandboxExecutor(api.bind(functions), SandboxLimits()) as sandbox:
            run = sandbox.run(outcome.plan)
    finally:
        library.kin.close()
    outcome.ran, outcome.error = run.error is None, run.error or ""
    outcome.asked, outcome.said, outcome.brought = list(person.asked), list(person.said), list(person.brought)
    outcome.success, outcome.why = judge(case, goal, outcome.error, person, calls, world, before)
    return outcome


def recovery_rate(outcomes: Sequence[RecoveryOutcome]) -> float | None:
    """Percent of the outcomes that succeeded; None when there are none."""
    return 100.0 * sum(o.success for o in outcomes) / len(outcomes) if outcomes else None
