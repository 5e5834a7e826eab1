"""The ``precond`` baseline: predefined precondition checks per action, answered by the grounded tools.

Two sets of checks. ``paper`` (the default): the RAIDER paper's action models only (its Appendix B.1, Table
B.3), nested checks of a structured query ``verb(args)``; unstructured queries are not supported (no verdict, as
the paper says of this method). pick(object, location): is_present object, robot_holding none, if the location
is openable: is_open location. place(object, location): is_present object, robot_holding object, if the
location is openable: is_open location. open/close(receptacle): is_present, robot_holding none, is_openable,
is_closed / is_open. turnon/turnoff(object): is_present, robot_holding none, is_toggeable (the direction of a
``toggle`` is unknown, so not its on/off state). slice(object): is_present, robot_holding knife, is_sliceable,
not_sliced. Mapped here: grasp and pick are pick (the location: the container the object is inside);
place_object(target) and place(obj, target) are place; put_first_on_second is pick then place; toggle is
turnon/turnoff. Two actions have no model in the table and get the nearest one's checks:
handover_object_to_human() is place(held object, person) and wipe(surface) is slice with the sponge.
``is_present`` takes the first of the names that fit (no uniqueness check in the table). Reach, blockage
and kind beyond the table are not checked; an explanation is the failed check in words, or the checks that
held.

``broad`` (a labelled option, teachbot's checker before issue 28): more than the table. A structured
query is parsed as a call; a sentence by keywords
(verbs and their synonyms give the action; its arguments are object or place names found word for word
in the sentence, the longest for a one-argument action, in order for two; failing a full name, a
name's last word such as "cup"). Then each action runs a fixed list of checks: the object exists and
its name is unique, the hand is free or holds what is needed, the thing's kind allows the action, its
state does not make it pointless, it is not inside a closed container nor blocked, it is within
reach. The first failed check is the verdict. Relations ("the cup next to the juice") and categories
("something to drink") are beyond it by design: that is what the RAIDER paper's predefined baseline
shows. It never sees a case's expected answer.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from teachbot.raider.agent import CheckResult, ToolUse
from teachbot.raider.pfm import parse_call
from teachbot.raider.tools import GroundedTools, ToolError, normalise

PRECOND_CHECKS = ("paper", "broad")


@dataclass(frozen=True)
class ActionSpec:
    """What one action needs. ``args``: how many names it takes; ``hand``: free | held | knife | sponge |
    first (it must hold its first argument); ``prop``: the property its first argument needs;
    ``pointless``: (state flag, value) that makes it pointless; ``take``: it takes its first argument
    from where it rests (blockers and closed containers matter); ``target``: its last argument is where
    something goes (a closed container or a block with something on it is in the way)."""

    world: str
    args: int
    hand: str
    verbs: tuple[str, ...]
    prop: str = ""
    pointless: tuple[str, str] | None = None
    take: bool = False
    target: bool = False


ACTIONS: dict[str, ActionSpec] = {
    "grasp": ActionSpec("household", 1, "free", ("pick up", "pick", "grasp", "grab", "take", "get", "fetch"), "pickable", take=True),
    "place_object": ActionSpec("household", 1, "held", ("put down", "set down", "place", "put", "leave"), target=True),
    "handover_object_to_human": ActionSpec("household", 0, "held", ("hand over", "hand", "give", "pass")),
    "open": ActionSpec("household", 1, "free", ("open",), "openable", ("open", "True")),
    "close": ActionSpec("household", 1, "free", ("close", "shut"), "openable", ("open", "False")),
    "toggle": ActionSpec("household", 1, "free", ("toggle", "switch", "turn on", "turn off"), "togglable"),
    "slice": ActionSpec("household", 1, "knife", ("slice", "cut"), "sliceable", ("sliced", "True"), take=True),
    "wipe": ActionSpec("household", 1, "sponge", ("wipe", "clean"), "cleanable", ("clean", "True")),
    "pick": ActionSpec("tabletop", 1, "free", ("pick up", "pick", "grasp", "grab", "take", "lift"), "graspable", take=True),
    "place": ActionSpec("tabletop", 2, "first", ("put down", "set down", "place", "drop"), target=True),
    "put_first_on_second": ActionSpec("tabletop", 2, "free", ("put", "move", "stack", "set"), "graspable", take=True, target=True),
}
PICK = ("present", "hand_none", "location_open")
PLACE = ("present", "hand_object", "target_open")
TABLE_B3: dict[str, tuple[str, ...]] = {  # the paper's Table B.3, for this robot's actions (see the module's docstring)
    "grasp": PICK, "pick": PICK, "put_first_on_second": (*PICK, "target_open"),
    "place_object": PLACE, "place": PLACE, "handover_object_to_human": ("present", "hand_object"),
    "open": ("present", "hand_none", "is_openable", "is_closed"), "close": ("present", "hand_none", "is_openable", "is_open"),
    "toggle": ("present", "hand_none", "is_togglable"),
    "slice": ("present", "hand_knife", "is_sliceable", "not_sliced"), "wipe": ("present", "hand_sponge"),
}
STATE_CHECKS = {"is_closed": ("open", "True", "open"), "is_open": ("open", "False", "closed"),
                "not_sliced": ("sliced", "True", "sliced")}
STATE_WORDS = {("open", "True"): "open", ("open", "False"): "closed", ("sliced", "True"): "sliced", ("clean", "True"): "clean"}


@dataclass
class PrecondResult(CheckResult):
    """A check's result with the issue type of the failed precondition ('IN' when none failed)."""

    issue_type: str = ""


def find_names(text: str, names: list[str]) -> list[str]:
    """Known names that occur word for word in ``text``, longest first where they overlap, and the last
    words of known names ("cup" of "red cup") elsewhere in it, in the order they occur."""
    words = normalise(text)
    spans: list[tuple[int, int, str]] = []

    def free(m: re.Match[str]) -> bool:
        return all(m.end() <= a or m.start() >= b for a, b, _ in spans)

    for name in sorted(names, key=len, reverse=True):
        spans += [(m.start(), m.end(), name) for m in re.finditer(rf"\b{re.escape(normalise(name))}\b", words) if free(m)]
    heads = {normalise(n).split()[-1] for n in names if normalise(n)}
    spans += [(m.start(), m.end(), m.group(0)) for m in re.finditer(r"[a-z]+", words) if m.group(0) in heads and free(m)]
    return [name for _, _, name in sorted(spans)]


def parse_query(query: str, world: str, names: list[str]) -> tuple[str, list[str]]:
    """(action, argument names) of a structured call or a sentence; ('', []) when no action of
    ``world`` fits. In a sentence: the first verb keyword gives the action; a one-argument action takes
    the longest name found (a place action its last one), a two-argument action the first two."""
    try:
        verb, args = parse_call(query)
    except ValueError:
        pass
    else:
        if verb not in ACTIONS or ACTIONS[verb].world != world:
            return "", []
        return verb, [str(a).strip().strip("'\"") for a in args[: ACTIONS[verb].args]]  # not hand='right'
    text = normalise(query)
    hits = []
    for action, spec in ACTIONS.items():
        if spec.world != world:
            continue
        for verb in spec.verbs:
            m = re.search(rf"\b{re.escape(verb)}\b", text)
            if m:
                hits.append((m.start(), -len(verb), action))
    if not hits:
        return "", []
    action = min(hits)[2]
    found = find_names(text, names)
    spec = ACTIONS[action]
    if spec.args == 2 or not found:
        return action, found[:2]
    if spec.target:
        return action, [found[-1]]
    return action, [max(found, key=len)]


def _target(spec: ActionSpec, names: list[str]) -> str:
    """The name of where the action puts something ('' for none, or for a position [x, y])."""
    return names[-1] if spec.target and names and not names[-1].startswith("[") else ""


class PrecondChecker:
    """The predefined checks over one scene's tools; ``check(query)`` as :class:`RaiderAgent`'s. ``checks``:
    paper (Table B.3's action models, the default) or broad (see the module's docstring)."""

    def __init__(self, tools: GroundedTools, world: str, checks: str = "paper") -> None:
        if checks not in PRECOND_CHECKS:
            raise ValueError(f"unknown precond checks {checks!r}; use one of {', '.join(PRECOND_CHECKS)}")
        self.tools = tools
        self.world = world
        self.checks = checks
        self._result = PrecondResult("", "", "")

    def check(self, query: str) -> PrecondResult:
        """Run the action's checks in their fixed order; the first that fails is the verdict."""
        started = time.monotonic()
        result = PrecondResult(query.strip(), "", "")
        self._result = result
        listing = json.loads(self._call("object_detection"))
        if self.checks == "paper":
            self._table_b3(query)
            result.turns = 1
            result.elapsed = time.monotonic() - started
            return result
        action, args = parse_query(query, self.world, [*listing.get("objects", []), *listing.get("places", [])])
        if not action:
            result.explanation, result.stopped = f"no action of the {self.world} robot recognised in {query!r}", "unknown_action"
        else:
            self._run(action, args)
        result.turns = 1
        result.elapsed = time.monotonic() - started
        return result

    # ------------------------------------------------------------------ plumbing
    def _call(self, name: str, *args: str) -> str:
        try:
            answer = self.tools.call(name, list(args))
        except ToolError as exc:
            self._result.tool_calls.append(ToolUse(name, list(args), str(exc), False))
            raise
        self._result.tool_calls.append(ToolUse(name, list(args), answer, True))
        return answer

    def _json(self, name: str, obj: str) -> dict[str, Any]:
        return json.loads(self._call(name, obj))

    def _verdict(self, issue: str, explanation: str) -> None:
        r = self._result
        r.final_response = "none" if issue == "IN" else "ambiguity" if issue == "IA" else "unfeasibility"
        r.issue_type, r.explanation = issue, explanation

    # ------------------------------------------------------------------ the checks
    def _run(self, action: str, args: list[str]) -> None:
        spec = ACTIONS[action]
        if len(args) < spec.args:
            self._verdict("IU3", f"{action} needs {spec.args} object(s), but of what the query names the robot knows only "
                          f"{', '.join(args) or 'nothing'}: not found in the scene")
            return
        names = []
        for arg in args[: max(spec.args, 1)]:
            if arg.startswith("["):  # a position [x, y] as the target: nothing to look up
                names.append(arg)
                continue
            try:
                names.append(self.tools.resolve(arg))
            except ToolError as exc:
                ambiguous = "could be" in str(exc)
                self._result.grounding = re.findall(r"any of (.*); name", str(exc))[0].split(", ") if "any of" in str(exc) else []
                self._verdict("IA" if ambiguous else "IU3", f"{'ambiguous' if ambiguous else 'not found'}: {exc}")
                return
        self._result.grounding = [n for n in names if not n.startswith("[")]
        held = self._held()
        if spec.args == 0 and not names and held:
            self._result.grounding = [held]
        for check in (self._hand, self._property, self._state, self._container, self._blocked, self._reach):
            failed = check(action, spec, names, held)
            if failed:
                self._verdict(*failed)
                return
        things = ", ".join(dict.fromkeys(names + ([held] if held else []))) or "nothing named"
        self._verdict("IN", f"{action}({', '.join(names)}): every precondition holds ({things}: known, the hand as needed, "
                      "kind and state allow it, free to take, within reach)")

    def _held(self) -> str:
        m = re.match(r"The robot is holding (.+)\.$", self._call("robot_holding"))
        return m.group(1) if m else ""

    def _hand(self, action: str, spec: ActionSpec, names: list[str], held: str) -> tuple[str, str] | None:
        if spec.hand == "free":
            return ("IU6", f"the hand is not free: the robot is holding {held}, and {action} {names[0]} needs an empty hand") \
                if held else None
        if not held:
            return "IU6", f"the robot's hand is empty (holding nothing); {action} needs it to hold {names[0] if names else 'something'}"
        if spec.hand in ("knife", "sponge"):
            kind = self._json("get_obj_properties", held).get("category", "")
            if kind != spec.hand:
                return "IU6", f"{action} {names[0]} needs the {spec.hand} in the hand, but the robot is holding {held}"
        wanted = names[0] if names and (spec.hand == "first" or spec.args == 0) else ""  # handover: the thing named
        if wanted and wanted != held:
            return "IU6", f"the robot is holding {held}, not {wanted}"
        return None

    def _property(self, action: str, spec: ActionSpec, names: list[str], held: str) -> tuple[str, str] | None:
        if not spec.prop:
            return None
        props = self._json("get_obj_properties", names[0])
        if props.get(spec.prop) != "true":
            return "IU5", f"{names[0]} (a {props.get('category', 'thing')}) is not {spec.prop}: the robot cannot {action} it"
        return None

    def _state(self, action: str, spec: ActionSpec, names: list[str], held: str) -> tuple[str, str] | None:
        if spec.pointless is not None:
            flag, value = spec.pointless
            if self._json("get_obj_state", names[0]).get(flag) == value:
                return "IU4", f"{names[0]} is already {STATE_WORDS[spec.pointless]}: {action} would change nothing"
        if action == "put_first_on_second" and self._json("get_obj_state", names[0]).get("supported_by") == names[1]:
            return "IU4", f"{names[0]} is already on {names[1]}: nothing to do"
        return None

    def _closed(self, name: str) -> bool:
        return self._json("get_obj_state", name).get("open") == "False"

    def _container(self, action: str, spec: ActionSpec, names: list[str], held: str) -> tuple[str, str] | None:
        if spec.take:
            inside = self._json("get_obj_state", names[0]).get("inside", "")
            if inside and self._closed(inside):
                return "IU2", f"{names[0]} is inside the {inside}, which is closed: it cannot be reached before the {inside} is opened"
        target = _target(spec, names)
        if target and self._json("get_obj_properties", target).get("openable") == "true" and self._closed(target):
            return "IU2", f"the {target} is closed: nothing can be put inside it before it is opened"
        return None

    def _blocked(self, action: str, spec: ActionSpec, names: list[str], held: str) -> tuple[str, str] | None:
        if spec.take:
            answer = self._call("check_obj_relationship", "blocking", names[0])
            if not answer.startswith("Nothing"):
                return "IU2", f"{names[0]} is blocked: {answer} It cannot be grasped before that is moved."
        target = _target(spec, names)
        if target and self.world == "tabletop" and self._json("get_obj_properties", target).get("container") != "true":
            answer = self._call("check_obj_relationship", "on top of", target)
            if not answer.startswith("Nothing"):
                return "IU2", f"{target} is occupied: {answer} Nothing more can be put on it."
        return None

    def _reach(self, action: str, spec: ActionSpec, names: list[str], held: str) -> tuple[str, str] | None:
        for name in (n for n in names if not n.startswith("[")):
            answer = self._call("dist_to_target", name)
            if not self.tools.reachable(name):  # here, or after driving to its place
                return "IU1", f"{name} is out of reach: {answer}"
        return None

    # ------------------------------------------------------------------ the paper's Table B.3
    def _table_b3(self, query: str) -> None:
        """The paper's action models: the nested checks of Table B.3 on a structured query."""
        r = self._result
        try:
            verb, raw = parse_call(query)
        except ValueError:
            r.explanation, r.stopped = f"unstructured query {query!r}: not supported by the predefined action models", "unsupported"
            return
        model = TABLE_B3.get(verb)
        if model is None or ACTIONS[verb].world != self.world:
            r.explanation, r.stopped = f"no predefined action model for {verb!r}", "unknown_action"
            return
        args = [str(a).strip().strip("\'\"") for a in raw[: ACTIONS[verb].args]]
        names: list[str] = []
        for arg in args:
            if arg.startswith("["):  # a position [x, y]: nothing to look up
                names.append(arg)
                continue
            try:
                names.append(self.tools.matches(arg)[0])  # is_present: the table has no uniqueness check
            except ToolError:
                r.grounding = [n for n in names if not n.startswith("[")]
                self._verdict("IU3", f"is_present {arg}: false, {arg} is not present in the scene")
                return
        r.grounding = [n for n in names if not n.startswith("[")]
        held = self._held()
        passed: list[str] = []
        for check in model:
            failed = self._b3(check, verb, names, held, passed)
            if failed:
                self._verdict(*failed)
                return
        self._verdict("IN", f"{verb}({', '.join(names)}): " + "; ".join(passed))

    def _b3(self, check: str, verb: str, names: list[str], held: str, passed: list[str]) -> tuple[str, str] | None:
        """One check of Table B.3; a failure's (issue type, explanation), or None with the check appended to ``passed``."""
        first = names[0] if names else held
        if check == "present":
            passed.append(f"{', '.join(names) or 'everything named'} present")
        elif check == "hand_none":
            if held:
                return "IU6", f"robot_holding none: false, the robot is holding {held} (the hand is full)"
            passed.append("robot_holding none")
        elif check == "hand_object":  # place: the object placed is the one held
            wanted = names[0] if verb == "place" else ""
            if not held or (wanted and held != wanted):
                return "IU6", (f"robot_holding {wanted or 'object'}: false, the robot is "
                               + (f"holding {held}" if held else "holding nothing (the hand is empty)"))
            passed.append(f"robot_holding {held}")
        elif check in ("hand_knife", "hand_sponge"):
            tool = check.split("_")[1]
            kind = json.loads(self._call("get_obj_properties", held)).get("category", "") if held else ""
            if kind != tool:
                return "IU6", (f"robot_holding {tool}: false, the robot is "
                               + (f"holding {held}, not the {tool}" if held else f"holding nothing (the hand is empty), not the {tool}"))
            passed.append(f"robot_holding {tool}")
        elif check in ("location_open", "target_open"):  # pick: the container it is inside; place: the target
            location = names[-1] if check == "target_open" and names else (
                self._json("get_obj_state", first).get("inside", "") if check == "location_open" else "")
            if location and not location.startswith("[") and self._json("get_obj_properties", location).get("openable") == "true":
                if self._json("get_obj_state", location).get("open") == "False":
                    return "IU2", f"is_open {location}: false, the {location} is closed" + (
                        f" and {first} is inside it" if check == "location_open" else "")
                passed.append(f"{location} open")
        elif check in STATE_CHECKS:  # a state: (flag, value that fails, words)
            flag, bad, words = STATE_CHECKS[check]
            if self._json("get_obj_state", first).get(flag) == bad:
                return "IU4", f"{check.replace('_', ' ')} {first}: false, {first} is already {words}"
            passed.append(f"{first} not {words}")
        else:  # a property: is_openable, is_togglable, is_sliceable
            prop = check[3:]
            if json.loads(self._call("get_obj_properties", first)).get(prop) != "true":
                return "IU5", f"is_{prop} {first}: false, {first} is not {prop}"
            passed.append(f"{first} {prop}")
        return None
