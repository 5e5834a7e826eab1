"""A recovery planner stand-in: writes a recovery plan from the text of the recovery prompt only.

No LLM: it reads the prompt's last block (``Action:``, ``Robot holding:``, ``Issue:`` and, in the paper's
Table 2 contexts with a scene, ``Scene:``), never the case or the world, and answers as a chat model does: a
sentence, then the plan in a ```python fence. Its rules follow the explanation's words: an ambiguity ("'cup'
could be the red cup or the blue cup") is asked about; a closed container is opened first; a full or wrong
hand is emptied where the person says (and the needed tool grasped); a blocker is moved away; a thing out of
reach is asked for ("Could you bring it closer?"), as in the paper's own example, then the action is retried;
anything else is said, with the explanation as the reason. Without an explanation (the scene-only context) it
can only ask about an ambiguity from the scene's names and otherwise says it cannot do the action, with no
reason: it proves the harness, the contexts and the judge, not any model (``teachbot eval raider
--recovery-stand-in``). Pure Python, no ROS.
"""

from __future__ import annotations

import re

from teachbot.llm.scripted import ScriptedModel
from teachbot.raider.pfm import parse_call

POINTS = ("top left corner", "top side", "top right corner", "left side", "middle", "right side",
          "bottom left corner", "bottom side", "bottom right corner")
VERBS = {"grab": "grasp", "take": "grasp", "get": "grasp", "pick up": "grasp", "pick": "grasp", "cut": "slice",
         "open": "open", "close": "close", "toggle": "toggle", "switch on": "toggle", "turn on": "toggle", "wipe": "wipe",
         "put": "put_first_on_second", "stack": "put_first_on_second", "place": "place_object", "hand": "handover_object_to_human",
         "give": "handover_object_to_human", "slice": "slice"}
EMPTY = re.compile(r"\bholds nothing|\bholding nothing|\bnot holding anything|\bhand is empty|\bempty hand|\bnothing in (?:its|the) hand")
REACH = re.compile(r"\bout of (?:[\w']+ ){0,3}reach|\bbeyond\b[^;]*?\breach|\btoo far\b|\bunreachable\b|\bcannot reach\b|"
                   r"\bnot (?:within|in) (?:[\w']+ ){0,3}reach|\boutside\b[^;]*?\b(?:reach|workspace)\b")


def as_call(action: str, household: bool) -> tuple[str, list[str]]:
    """The action as (function, arguments): a call as written, a sentence by its verb and its objects."""
    try:
        fn, args = parse_call(action)
        return fn, [str(a) for a in args]
    except ValueError:
        text = action.lower()
        verb = next((v for v in VERBS if text.startswith(v)), "")
        if not verb:
            return "", []
        fn = VERBS[verb] if household or VERBS[verb] != "grasp" else "pick"
        objects = re.split(r" (?:in|into|on|to) ", text[len(verb):].strip().removeprefix("up "))
        return fn, [re.sub(r"^(?:the|a|an) ", "", o.strip()) for o in objects if o.strip()]


def _candidates(why: str, scene: str, args: list[str]) -> tuple[str, list[str]]:
    """(the ambiguous word, two candidates) from the explanation, else from the scene's names."""
    m = re.search(r"'([^']+)' could be (?:any of )?(.+?)[;.:]", why)
    if m:
        word, names = m.groups()
        return word, re.split(r", | or (?:the )?", names.removeprefix("the "))[:2]
    names = [line.split(":", 1)[0].strip() for line in scene.splitlines() if ": state" in line]
    for word in args:
        found = [n for n in names if word and re.search(rf"\b{re.escape(word)}\b", n) and n != word]
        if len(found) >= 2:
            return word, found[:2]
    return "", []


def plan_lines(action: str, held: str, verdict: str, why: str, scene: str, household: bool) -> list[str]:
    """The plan's statements for one prompt's action, hand, verdict, explanation and scene."""
    fn, args = as_call(action, household)
    call = f"{fn}({', '.join(map(repr, args))})"
    if not fn:
        return [f"say({f'I do not know how to do {action}.'!r})"]
    spot = "[p for p in list_locations() if p in answer['text']][0]" if household else f"[p for p in {POINTS!r} if p in answer['text']][0]"
    put_down = (lambda thing: [f"answer = ask('Where should I put the {thing} down?')", f"spot = {spot}",
                               "place_object(spot)" if household else f"put_first_on_second({thing!r}, spot)"])
    if verdict == "ambiguity":
        word, pair = _candidates(why, scene, args)
        if len(pair) == 2:
            a, b = pair
            chosen = ", ".join("choice" if x == word else repr(x) for x in args)
            return [f"answer = ask('Which one do you mean: the {a} or the {b}?')",
                    f"choice = {b!r} if {b!r} in answer['text'] else {a!r}", f"{fn}({chosen})"]
        return ["answer = ask('Which one do you mean?')", f"say({'I will wait until you tell me which one.'!r})"]
    closed = re.search(r"inside the (\w+), which is closed|the (\w+) is closed", why, re.I)
    if closed:
        return [f"open({(closed.group(1) or closed.group(2))!r})", call]
    holding = re.search(r"holding (?:the |a |an )?([a-z ]+?)(?:,|$| not| and)", why)
    tool = re.search(r"needs (?:the |a )?(knife|sponge)\b", why)
    full = re.search(r"\bhand is (?:full|not free|occupied)|needs an empty hand", why)
    if tool or (held != "nothing" and (full or (holding and ", not " in why))):
        steps = (put_down(held) if held != "nothing" else []) + ([f"grasp({tool.group(1)!r})"] if tool else [])
        return steps + ([f"pick({args[0]!r})"] if fn == "place" else []) + [call]
    if fn in ("place_object", "handover_object_to_human") and EMPTY.search(why):
        where = f" on the {args[0]}" if fn == "place_object" and args else " to you"
        return [f"answer = ask('What should I bring{where}?')",
                "thing = [o for o in list_objects() if o in answer['text']][0]", "grasp(thing)", call]
    blocker = re.search(r"(?:blocked|occupied): ([a-z ]+?) is (?:blocking|on top of)", why)
    if blocker:
        thing = re.sub(r"^(?:the|a|an) ", "", blocker.group(1))
        return [f"grasp({thing!r})", *put_down(thing)[:2], "place_object(spot)", call] if household else [*put_down(thing), call]
    if REACH.search(why.lower()):
        far = next((a for a in args if a and a in why), args[0] if args else "")
        if far:
            return [f"ask({f'I cannot reach the {far}. Could you bring it closer to me?'!r})", call]
    reason = why.strip().rstrip(".")
    return [f"say({(f'I cannot do {action}: {reason}.' if reason else f'I cannot do {action}.')!r})"]


def plan_from_prompt(prompt: str) -> str:
    """A recovery plan for the prompt's last Action, hand and Issue, the way a chat model writes it."""
    tail = prompt[prompt.rindex("\nNow\n"):]
    action = re.search(r"^Action: (.*)$", tail, re.M).group(1)  # type: ignore[union-attr]
    held_line = re.search(r"^Robot holding: (.*)$", tail, re.M)
    held = held_line.group(1).strip() if held_line else "nothing"
    verdict, _, why = re.search(r"^Issue: (.*)$", tail, re.M).group(1).partition(": ")  # type: ignore[union-attr]
    scene = tail.split("\nScene:\n", 1)[1] if "\nScene:\n" in tail else ""
    household = "  move_to(" in prompt
    lines = plan_lines(action, held, verdict, why, scene, household)
    return "Here is a plan that resolves the issue:\n```python\n" + "\n".join(lines) + "\n```\n"


def recovery_stand_in() -> ScriptedModel:
    """The stand-in as a model for :class:`~teachbot.raider.recovery.RecoveryPlanner`."""
    return ScriptedModel(respond=plan_from_prompt, stop=(), name="stand-in:recovery")
