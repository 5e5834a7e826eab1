"""A stand-in model for the RAIDER agent offline (``teachbot eval raider --stand-in``): it decides only from its prompt.

It is no model: a script that reads the text it is sent, the system prompt and the conversation so far, and never
a case's expected answer. From the system prompt it takes the format (``call_tool{...}``, several per turn, or one
``Tool call:`` line per turn), the procedure steps present (a GROUND step, an ASK step: the ablations), the arm's
reach and workspace (the paper profile's constraints) and the world (kitchen or tabletop); from the conversation
the query, the object list and every tool response so far. Then it follows the procedure its prompt has:

- GROUND: the query's words are linked to the objects listed, by name, by a name's last word ("cup"), by a
  category ("something to drink": a ``drink`` property; "fruit"), by a state ("the clean cup") and by a relation
  to another object ("the cup behind the plate"), each asked of the tools. Without the step it takes the query's
  words literally: a category or a relation is not looked into.
- ASK and ANSWER: with the ASK step it asks what the action needs (hand, properties, state, what it is inside,
  what blocks it or lies on it, the distance); without it only the hand and the object's state.
- ISSUE: it decides from the answers, in a fixed order (hand, properties, state, obstruction, reach), and names
  the facts it used.

It reads text tool calling (one prompt string) and native tool calling (the messages of the OpenAI tools API, as
``ScriptedModel(native_tools=True)`` hands them over) alike, and answers in the same mode.

``slip``: a seeded chance, per turn, that the turn goes wrong in one of the ways the paper's warnings catch: a
final response written while tool calls are pending (Warning 1), a made-up tool (2), a malformed call (3), or
neither a call nor a final response (4). The next turn sees the warning and the tool responses and carries on
(it may slip again by the same chance). Its figures prove the harness, the ablation flags and the warning path,
not any model.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from teachbot.llm.base import SYSTEM_END
from teachbot.llm.scripted import ScriptedModel
from teachbot.raider.precond import ACTIONS, find_names, parse_query
from teachbot.raider.tools import TOOL_PARAMETERS, normalise

Call = tuple[str, tuple[str, ...]]
TAKE = ("grasp", "pick", "put_first_on_second", "slice")
FREE_HAND = ("grasp", "pick", "put_first_on_second", "open", "close", "toggle")
NEEDS = {"grasp": "pickable", "pick": "graspable", "put_first_on_second": "graspable", "open": "openable",
         "close": "openable", "toggle": "togglable", "slice": "sliceable", "wipe": "cleanable"}
# common sense of the stand-in: words that name a kind of thing, and what the tools say of such a thing
KINDS: dict[str, tuple[str, ...]] = {
    "drink": ("prop:drink",), "fruit": ("apple", "banana", "orange", "pear", "watermelon", "lemon"),
    "light": ("lamp",), "container": ("prop:container",), "grasp": ("prop:graspable", "prop:pickable"),
    "boil": ("kettle",), "surface": ("place",), "thing": ("any",), "something": ("any",), "cube": ("cube",),
}
RELATIONS = (("on top of", "on top of"), ("inside", "inside"), ("in", "inside"), ("on", "on top of"), ("under", "below"),
             ("behind", "behind"), ("left of", "left of"), ("right of", "right of"), ("next to", "near"), ("near", "near"))
STATES = {"clean": ("clean", "True"), "dirty": ("clean", "False"), "sliced": ("sliced", "True"), "unsliced": ("sliced", "False"),
          "whole": ("sliced", "False"), "empty": ("filled", "False"), "full": ("filled", "True")}
FILLERS = {"the", "a", "an", "up", "me", "some", "you", "please", "can", "could", "to", "of", "in", "on", "into"}
SLIPS = ("premature", "made_up_tool", "malformed", "nothing")


@dataclass
class Reading:
    """What the stand-in read in its prompt."""

    paper: bool
    ground: bool
    ask: bool
    world: str
    query: str
    reach: float | None
    workspace: list[tuple[float, float]] | None
    objects: list[str] | None
    places: list[str]
    answers: dict[Call, str] = field(default_factory=dict)
    turns: int = 0
    native: bool = False  # the conversation came as native tool-calling messages


def read_native(prompt: str) -> Reading:
    """A native tool-calling conversation (``teachbot.llm.tool_calls.conversation_prompt``'s JSON) read as the text
    one: the system prompt, the first message, and each call's answer (a warning is no answer)."""
    messages = json.loads(prompt)["messages"]
    calls: dict[str, Call] = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            try:
                args = json.loads(c["function"]["arguments"] or "{}")
            except json.JSONDecodeError:
                continue
            values = tuple(args.values()) if isinstance(args, dict) else tuple(args)
            calls[c["id"]] = (c["function"]["name"], tuple(str(v) for v in values))
    tools = [m for m in messages if m["role"] == "tool" and m["tool_call_id"] in calls]
    text = "".join(f"{m['content']}\n" for m in messages if m["role"] == "user")
    reading = read_prompt(messages[0]["content"] + SYSTEM_END + "Action query:" + text.split("Action query:", 1)[-1])
    reading.native, reading.paper = True, "Task Objective" in messages[0]["content"]
    reading.turns = sum(1 for m in messages if m["role"] == "assistant")
    for m in tools:
        content = str(m["content"])
        if content.startswith(("Warning", "accepted")):
            continue
        reading.answers[calls[m["tool_call_id"]]] = content.split(" returned ", 1)[1] if content.startswith("Call to tool") else content
    if reading.objects is None and ("object_detection", ()) in reading.answers:
        data = json.loads(reading.answers[("object_detection", ())])
        reading.objects, reading.places = list(data.get("objects", [])), list(data.get("places", []))
    return reading


def read_prompt(prompt: str) -> Reading:
    """The format, procedure, limits, query, object list and tool responses in ``prompt``."""
    system, convo = prompt.split(SYSTEM_END, 1) if SYSTEM_END in prompt else ("", prompt)
    paper = "call_tool{" in system
    reach = re.search(r"single arm with a ([\d.]+) m reach", system)
    box = re.search(r"workspace x (-?[\d.]+) to (-?[\d.]+) m, y (-?[\d.]+) to (-?[\d.]+) m, z (-?[\d.]+) to (-?[\d.]+) m", system)
    workspace = [(float(box.group(i)), float(box.group(i + 1))) for i in (1, 3, 5)] if box else None
    convo = convo.split("Action query:", 1)[-1]  # the current check, past any worked example
    query = convo.split("\n", 1)[0].strip()
    reading = Reading(paper, "GROUND" in system or "1. Ground:" in system, "ASK - Question" in system or "Ask: write" in system,
                      "household" if "kitchen" in system else "tabletop", query, float(reach.group(1)) if reach else None,
                      workspace, None, [])
    listed = re.search(r"^Objects in the scene: (\{.*\})$", convo, re.M)
    if listed:
        data = json.loads(listed.group(1))
        reading.objects, reading.places = list(data.get("objects", [])), list(data.get("places", []))
    reading.turns = len(re.findall(r"^Thought:", convo, re.M))
    if paper:
        for m in re.finditer(r"^Tool response: Call to tool (\w+) with args (.*?) returned (.*?)(?=\n(?:Tool response:|Warning \d|"
                             r"Thought:)|\Z)", convo, re.M | re.S):
            args = json.loads(m.group(2))
            reading.answers[(m.group(1), tuple(args if isinstance(args, list) else args.values()))] = m.group(3).strip()
    else:
        for m in re.finditer(r"Tool call: (\w+)\((.*?)\)\nTool response: (.*?)(?=\n(?:Warning:|Thought:)|\Z)", convo, re.S):
            args = tuple(a.strip().strip("'\"") for a in m.group(2).split(",") if a.strip())
            reading.answers[(m.group(1), args)] = m.group(3).strip()
    if reading.objects is None and ("object_detection", ()) in reading.answers:
        data = json.loads(reading.answers[("object_detection", ())])
        reading.objects, reading.places = list(data.get("objects", [])), list(data.get("places", []))
    return reading


class Need(Exception):
    """Raised by the reasoning when facts are missing: the calls that would give them."""

    def __init__(self, calls: list[Call]) -> None:
        super().__init__(calls)
        self.calls = calls


class Thinker:
    """The stand-in's reasoning over one reading: each fact comes from a tool response, or is asked for."""

    def __init__(self, r: Reading) -> None:
        self.r = r

    def ask(self, *calls: Call) -> list[str]:
        """The answers to ``calls``; Need with the missing ones."""
        missing = [c for c in calls if c not in self.r.answers]
        if missing:
            raise Need(missing)
        return [self.r.answers[c] for c in calls]

    def json(self, tool: str, name: str) -> dict[str, Any]:
        answer = self.ask((tool, (name,)))[0]
        try:
            return json.loads(answer)
        except json.JSONDecodeError:
            return {}

    def related(self, relation: str, name: str) -> list[str]:
        answer = self.ask(("check_obj_relationship", (relation, name)))[0]
        if answer.startswith("Nothing"):
            return []
        return re.sub(rf" (?:is|are) {re.escape(relation)} {re.escape(name)}\.$", "", answer).split(", ")

    # ------------------------------------------------------------------ grounding
    def ground(self, phrase: str, names: list[str]) -> list[str]:
        """The objects ``phrase`` (the query's words for one argument) may mean, narrowed by what the tools say."""
        key = normalise(phrase)
        if key in (normalise(n) for n in names):
            return [n for n in names if normalise(n) == key]
        text = normalise(self.r.query)
        words = re.findall(r"[a-z]+", key)
        # a name's last word fits the names that end in it ("cup": "red cup"); a name of several words fits only itself
        fits = [n for n in names if len(words) == 1 and re.search(rf"\b{re.escape(words[-1])}\b", normalise(n))]
        if not self.r.ground:  # no grounding step: the words as written
            return fits
        rest = text[text.find(words[-1]):] if words and words[-1] in text else key  # the phrase and what follows it
        kinds = sorted((k for k in KINDS if re.search(rf"\b{k}\b", rest)), key=lambda k: KINDS[k] == ("any",))
        if not fits and kinds:
            kind = KINDS[kinds[0]]
            if any(k.startswith("prop:") or k not in ("any", "place") for k in kind):
                self.ask(*[("get_obj_properties", (n,)) for n in self.r.objects or []])  # all at once
            fits = [n for n in names if self._is_kind(n, kind)]
        for word, (flag, value) in STATES.items():
            if re.search(rf"\b{word}\b", text) and len(fits) > 1:
                self.ask(*[("get_obj_state", (n,)) for n in fits])
                fits = [n for n in fits if self.json("get_obj_state", n).get(flag) == value] or fits
        for words_, relation in RELATIONS:
            m = re.search(rf"\b{words_} (?:the )?([a-z ]+?)(?:$| into | in | on | to )", text[text.find(words[-1]) if words else 0:] + " ")
            if m:
                anchor = find_names(m.group(1), names)
                if len(fits) > 1 and anchor and anchor[0] in names:
                    fits = [n for n in fits if n in self.related(relation, anchor[0])] or fits
                break
        return fits

    def _is_kind(self, name: str, kind: tuple[str, ...]) -> bool:
        if "any" in kind:
            return name in (self.r.objects or [])
        if "place" in kind:
            return name in self.r.places
        if name not in (self.r.objects or []):
            return False
        props = self.json("get_obj_properties", name)
        return any(props.get(k[5:]) == "true" if k.startswith("prop:") else props.get("category") == k for k in kind)

    # ------------------------------------------------------------------ the verdict
    def decide(self) -> dict[str, Any]:
        """The final response, or Need."""
        if self.r.objects is None:
            raise Need([("object_detection", ())])
        names = [*self.r.objects, *self.r.places]
        action, phrases = parse_query(self.r.query, self.r.world, names)
        if not action:
            return final("unfeasibility", f"the robot has no action for {self.r.query!r}", [])
        spec = ACTIONS[action]
        if "(" not in self.r.query:  # a sentence: the things it names, and the kinds of thing, in their order
            phrases = mentions(self.r.query, names, action)
        grounded: list[str] = []
        for phrase in phrases[: max(spec.args, 1)]:
            fits = self.ground(phrase, names)
            if not fits:
                return final("unfeasibility", f"There is no {phrase} in the scene: it is not present.", grounded)
            if len(fits) > 1:
                return final("ambiguity", f"'{phrase}' could be the {' or the '.join(fits)}: it is ambiguous which one is meant.", fits)
            grounded.append(fits[0])
        if spec.args and len(grounded) < spec.args:
            return final("unfeasibility", f"{action} needs {spec.args} objects, but not all of them are present.", grounded)
        return self.check(action, grounded)

    def check(self, action: str, g: list[str]) -> dict[str, Any]:
        """Ask and answer: the action's preconditions on the grounded objects, the first that fails is the issue."""
        held_text = self.ask(("robot_holding", ()))[0]
        m = re.match(r"The robot is holding (.+)\.$", held_text)
        held = m.group(1) if m else ""
        first = g[0] if g else held
        if action in FREE_HAND and held:
            return final("unfeasibility", f"The hand is full: the robot is holding the {held}, and {action} needs an empty hand.", g)
        if action in ("place_object", "place", "handover_object_to_human", "slice", "wipe") and not held:
            need = {"slice": " slice needs the knife in the hand.", "wipe": " wipe needs the sponge in the hand."}.get(action, "")
            return final("unfeasibility", "The robot is holding nothing: its hand is empty." + need, g)
        if action == "place" and held != g[0]:
            return final("unfeasibility", f"The robot is holding the {held}, not the {g[0]}.", g)
        if action in ("slice", "wipe"):
            tool = "knife" if action == "slice" else "sponge"
            if self.json("get_obj_properties", held).get("category") != tool:
                return final("unfeasibility", f"{action} needs the {tool}, but the robot is holding the {held}.", g)
        if action == "handover_object_to_human" and g and held != g[0]:
            return final("unfeasibility", f"The robot is holding the {held}, not the {g[0]}.", g)
        if not first:
            return final("none", f"No issue: the robot can {action.replace('_', ' ')}.", g)
        state = self.json("get_obj_state", first)
        if self.r.ask:
            props = self.json("get_obj_properties", first)
            if NEEDS.get(action) and props.get(NEEDS[action]) != "true" and not (action == "pick" and props.get("pickable") == "true"):
                return final("unfeasibility", f"The {first} is not {NEEDS[action]}: a {props.get('category', 'thing')} cannot be "
                                              f"handled that way.", g)
        issue = self._state_issue(action, first, state, g)
        if issue:
            return final("unfeasibility", issue, g)
        if self.r.ask:
            issue = self._obstruction(action, g, state) or self._reach(g)
            if issue:
                return final("unfeasibility", issue, g)
        things = " and the ".join(g or [held])
        return final("none", f"No issue: the robot can {action.replace('_', ' ')} (the {things}).", g)

    def _state_issue(self, action: str, first: str, state: dict[str, Any], g: list[str]) -> str:
        pointless = {"open": ("open", "True", "open"), "close": ("open", "False", "closed"),
                     "slice": ("sliced", "True", "sliced"), "wipe": ("clean", "True", "clean")}.get(action)
        if pointless and state.get(pointless[0]) == pointless[1]:
            return f"The {first} is already {pointless[2]}."
        if action == "put_first_on_second" and state.get("supported_by") == g[1]:
            return f"The {first} is already on the {g[1]}."
        text = normalise(self.r.query)
        if action == "toggle" and re.search(r"\b(?:on|off)\b", text):
            wanted = "True" if re.search(r"\bon\b", text) else "False"
            if state.get("on") == wanted:
                return f"The {first} is already {'on' if wanted == 'True' else 'off'}."
        for word, (flag, value) in STATES.items():
            if re.search(rf"\b{word}\b", text) and state.get(flag, value) != value:
                return f"The {first} is not {word}: it is {'dirty' if word == 'clean' else 'clean' if word == 'dirty' else 'not ' + word}."
        return ""

    def _obstruction(self, action: str, g: list[str], state: dict[str, Any]) -> str:
        if action in TAKE and g:
            inside = state.get("inside", "")
            if inside and self.json("get_obj_state", inside).get("open") == "False":
                return f"The {g[0]} is inside the {inside}, which is closed: it must be opened first."
            self.ask(*[("check_obj_relationship", (rel, g[0])) for rel in ("on top of", "blocking")])
            for relation in ("on top of", "blocking"):
                blockers = [b for b in self.related(relation, g[0]) if b not in g]
                if blockers:
                    return (f"The {g[0]} is blocked: the {' and the '.join(blockers)} {'is' if len(blockers) == 1 else 'are'} "
                            f"{relation} it.")
        if action in ("place_object", "place", "put_first_on_second") and g:
            target = g[-1]
            props = self.json("get_obj_properties", target)
            if props.get("openable") == "true" and self.json("get_obj_state", target).get("open") == "False":
                return f"The {target} is closed: it must be opened before something is put inside it."
            if self.r.world == "tabletop" and props.get("container") != "true":
                on = [b for b in self.related("on top of", target) if b not in g]
                if on:
                    return f"The {target} is occupied: the {' and the '.join(on)} is on top of it."
        return ""

    def _reach(self, g: list[str]) -> str:
        for name in g:
            answer = self.ask(("dist_to_target", (name,)))[0]
            if self.r.reach is None:  # judged tools say it themselves
                if "within" not in answer.rsplit(";", 1)[-1]:
                    return f"The {name} is out of the arm's reach: {answer}"
                continue
            options = re.findall(r"([\d.]+) m from the arm's base(?: \(its top at x (-?[\d.]+), y (-?[\d.]+), z (-?[\d.]+) m)?", answer)
            if not any(self._fits(o) for o in options):
                best = min(options, key=lambda o: float(o[0])) if options else ("nan", "", "", "")
                if float(best[0]) <= self.r.reach and self.r.workspace is not None and best[1]:
                    axis, value, (lo, hi) = next((a, float(v), b) for a, v, b in zip("xyz", best[1:], self.r.workspace, strict=True)
                                                 if not b[0] <= float(v) <= b[1])
                    side = {"z": ("too low", "too high")}.get(axis, ("outside", "outside"))[value > hi]
                    return (f"The {name} is outside the arm's workspace: its top would be at {axis} {value:.2f} m, "
                            f"the workspace allows {lo:g} to {hi:g} m ({side}).")
                return f"The {name} is out of the arm's reach: {float(best[0]):.2f} m away at best, the arm reaches {self.r.reach:.2f} m."
        return ""

    def _fits(self, option: tuple[str, ...]) -> bool:
        assert self.r.reach is not None
        if float(option[0]) > self.r.reach:
            return False
        if self.r.workspace is None or not option[1]:
            return True
        return all(lo <= float(v) <= hi for v, (lo, hi) in zip(option[1:], self.r.workspace, strict=True))


def mentions(query: str, names: list[str], action: str) -> list[str]:
    """The argument phrases of a sentence: the names (or a name's last word) and the kind words in it, in their order;
    one for a one-argument action (the first, or the last for an action that puts something somewhere)."""
    text = normalise(query)
    found = []
    for n in find_names(text, names):
        at = text.find(normalise(n))
        before = text[:at].split()
        if n not in names and before and before[-1] not in FILLERS:  # "the gray block": the adjective too
            at, n = at - len(before[-1]) - 1, f"{before[-1]} {n}"
        found.append((at, n))
    verbs = {v for spec in ACTIONS.values() for v in spec.verbs}
    found += [(m.start(), m.group(0)) for k in KINDS for m in re.finditer(rf"\b{k}\b", text)
              if not (k in verbs and not text[: m.start()].strip(" ,?!.").replace("please", "").replace("can you", "")
                      .replace("could you", "").strip())]  # not the sentence's verb ("grasp the cup")
    found = [f for f in found if f[0] >= 0 and not any(o[0] < f[0] < o[0] + len(o[1]) for o in found if o != f)]
    ordered = [n for _, n in sorted(found)]
    spec = ACTIONS[action]
    if spec.args >= 2:
        return ordered[:2]
    if not ordered:
        return []
    return [ordered[-1]] if spec.target else [ordered[0]]


def final(verdict: str, explanation: str, grounding: list[str]) -> dict[str, Any]:
    return {"final_response": verdict, "explanation": explanation, "grounding": grounding}


class RaiderStandIn:
    """``respond(prompt) -> text`` for a :class:`ScriptedModel`; ``slip`` a seeded share of turns that go wrong."""

    def __init__(self, slip: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip is a share within 0..1, got {slip}")
        self.slip, self.seed, self.base_seed = slip, seed, seed

    def reseed(self, trial: int) -> None:
        """Another trial, other slips (the seed of trial t is the base seed plus t)."""
        self.seed = self.base_seed + trial

    def model(self) -> ScriptedModel:
        """The stand-in as a model (text tool calls)."""
        return ScriptedModel(respond=self, stop=(), name="stand-in:raider")

    def native_model(self) -> ScriptedModel:
        """The stand-in as a model with native tool calling (the OpenAI tools API's messages)."""
        return ScriptedModel(respond=self, stop=(), name="stand-in:raider", native_tools=True)

    def __call__(self, prompt: str) -> str:
        reading = read_native(prompt) if prompt.startswith('{"messages"') else read_prompt(prompt)
        digest = hashlib.sha256(f"{self.seed}\n{prompt}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        try:
            answer: dict[str, Any] | list[Call] = Thinker(reading).decide()
        except Need as need:
            answer = need.calls if reading.paper else need.calls[:1]
        slip = SLIPS[rng.randrange(len(SLIPS))] if rng.random() < self.slip else ""
        if reading.native:
            return write_native(answer, slip, reading.turns)
        return "Thought: " + write(reading.paper, answer, slip)


def _call_text(paper: bool, call: Call) -> str:
    if paper:
        return "call_tool" + json.dumps({"tool": call[0], "args": list(call[1])})
    return "Tool call: " + f"{call[0]}({', '.join(repr(a) for a in call[1])})"


def write(paper: bool, answer: dict[str, Any] | list[Call], slip: str = "") -> str:
    """One turn: the calls or the final response, or the slip in its place."""
    if slip == "nothing":
        return "I will think about the preconditions first."
    if slip == "made_up_tool":
        return "Let me look around first.\n" + _call_text(paper, ("scan_scene", ()))
    if slip == "malformed":
        return "Let me check.\n" + ('call_tool{"tool": "get_obj_state", "args": ["' if paper else "Tool call: get_obj_state(")
    if isinstance(answer, dict):
        text = "I have what I need.\n" + ("" if paper else "Final response: ") + json.dumps(answer)
        return text
    calls = "\n".join(_call_text(paper, c) for c in answer)
    if slip == "premature":  # a final response guessed while the calls are pending
        guess = final("none", "No issue: the robot can do it.", [])
        return f"Checking.\n{calls}\n" + ("" if paper else "Final response: ") + json.dumps(guess)
    return f"Checking.\n{calls}"


def write_native(answer: dict[str, Any] | list[Call], slip: str, turn: int) -> str:
    """One native turn as ``ScriptedModel`` takes it: plain text, or ``{"content", "tool_calls"}`` with arguments by name."""
    def named(call: Call, n: int) -> dict[str, Any]:
        return {"id": f"t{turn}-{n}", "name": call[0], "arguments": dict(zip(TOOL_PARAMETERS.get(call[0], {}), call[1], strict=False))}

    if slip == "nothing":
        return "I will think about the preconditions first."
    if slip == "made_up_tool":
        return json.dumps({"content": "Let me look around first.", "tool_calls": [named(("scan_scene", ()), 0)]})
    if slip == "malformed":
        return json.dumps({"content": "", "tool_calls": [{"id": f"t{turn}-0", "name": "get_obj_state", "arguments": "{oops"}]})
    if isinstance(answer, dict):
        return json.dumps({"content": "I have what I need.", "tool_calls": [
            {"id": f"t{turn}-f", "name": "final_response", "arguments": answer}]})
    calls = [named(c, n) for n, c in enumerate(answer)]
    if slip == "premature":  # a final response beside pending calls
        calls.append({"id": f"t{turn}-f", "name": "final_response", "arguments": final("none", "No issue.", [])})
    return json.dumps({"content": "Checking.", "tool_calls": calls})
