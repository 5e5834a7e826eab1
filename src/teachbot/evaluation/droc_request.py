"""How the DROC interaction double turns a request into a plan, from its prompt alone.

A chat model asked "bring me my cup" first looks at what is there (``list_objects()`` in the household,
``get_obj_names()`` on the tabletop; ``list_objects('table')`` for what is on the table,
``list_locations()`` for where things can go), then maps the request's verb to the robot API's skills,
with its words resolved against what it saw. ``RequestReader`` is that reading: a small grammar of the
API's verbs (``READINGS``) and the common sense of config/benchmarks/droc/common_sense.yaml (which things
are fruit, drinks, dishes). It is never handed the task, the variant or its plan; when it needs a look it
has not taken yet, :meth:`RequestReader.plan` answers that statement instead of a plan.

- "pick up / grasp / take / get the X"           -> ``grasp(X)``
- "put / place the X on / in the P" (household)  -> ``grasp(X)``, ``place_object(P)``; "the X goes on the P" too
- "put the X away"                               -> ``grasp(X)``, ``place_object(where X goes)``
- "clear / tidy up the P"                        -> for each thing on P: ``grasp``, ``place_object(where it goes)``
- "put the X on / in the P" (tabletop)           -> ``put_first_on_second(X, P)``
- "open the P"                                   -> ``open(P)``
- "bring / hand / give me the X"                 -> ``grasp(X)``, ``handover_object_to_human()``

What the prompt says of the right choice (``hints``, the weightiest first: the newest correction, older
ones, then the "# What I know:" lines) steers three readings, each by its words only:
- WHICH thing: words that fit several listed things ("my cup", "a drink": those whose name ends in the word
  or are of that kind) resolve to the one the first deciding hint names, leaving out those a hint rules
  out ("not the milk", "I don't drink milk"); with no hint, a guess (the double: drawn from its seed and
  the episode, the same for every method);
- WHERE a thing goes: "fruit goes on the counter" (the thing, its noun or its kind), "put it on the Q
  instead"; a place a hint calls full is not used; with no hint, a guess among ``list_locations()``;
- WHAT must come first: "open the P first" puts ``open(P)`` before taking a thing that
  ``list_objects('P')`` shows inside it.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Mapping, Sequence

from teachbot.config import load_yaml
from teachbot.evaluation.droc_tasks import Call
from teachbot.language.transcript import Transcript
from teachbot.paths import config_path

LISTING = {"household": "list_objects()", "tabletop": "get_obj_names()"}
LOOKS = ("list_objects", "list_locations", "get_obj_names")  # statements that only look
ARTICLES = r"(?:the |my |a |an |some |something to )?"
WHERE = "?where"  # a destination the request leaves open
ON = "(?:on|in|into|onto)"
# (world or '' for both, pattern, the plan: (skill, {field: the pattern's group or WHERE})); the first that fits
READINGS: tuple[tuple[str, str, tuple[tuple[str, dict[str, str]], ...]], ...] = (
    ("", rf"^(?:bring|hand|give) me {ARTICLES}(?P<x>.+)$",
     (("grasp", {"object_name": "x"}), ("handover_object_to_human", {}))),
    ("household", rf"^put (?:away {ARTICLES}(?P<x>.+)|{ARTICLES}(?P<y>.+?) away)$",
     (("grasp", {"object_name": "x|y"}), ("place_object", {"location": WHERE}))),
    ("household", rf"^(?:put|place) {ARTICLES}(?P<x>.+?) {ON} {ARTICLES}(?P<p>.+)$",
     (("grasp", {"object_name": "x"}), ("place_object", {"location": "p"}))),
    ("household", rf"^{ARTICLES}(?P<x>.+?) (?:goes|go|belongs) {ON} {ARTICLES}(?P<p>.+)$",
     (("grasp", {"object_name": "x"}), ("place_object", {"location": "p"}))),
    ("tabletop", rf"^(?:put|place) {ARTICLES}(?P<x>.+?) {ON} {ARTICLES}(?P<p>.+)$",
     (("put_first_on_second", {"object_name": "x", "target_name": "p"}),)),
    ("household", rf"^(?:pick up|grasp|take|get) {ARTICLES}(?P<x>.+)$", (("grasp", {"object_name": "x"}),)),
    ("household", rf"^open {ARTICLES}(?P<p>.+)$", (("open", {"thing": "p"}),)),
)
CLEAR = re.compile(rf"^(?:clear|clean up|tidy up|tidy) {ARTICLES}(?P<p>.+)$")  # each thing on P put where it goes
OPEN_FIRST = re.compile(r"\bopen (?:the )?([a-z]+) (?:first|before)", re.I)
FULL = re.compile(r"\bthe ([a-z]+) is full\b", re.I)
INSTEAD = re.compile(rf"\b(?:put|place) (?:it|them) {ON} (?:the )?([a-z]+) instead\b", re.I)
GOES = re.compile(rf"\b([a-z]+(?: [a-z]+)?) (?:goes|go|belongs|belong) {ON} (?:the )?([a-z]+)", re.I)

Guess = Callable[[str, Sequence[str]], str]


def first(words: str, candidates: Sequence[str]) -> str:
    """The guess of a reader that takes the first candidate listed."""
    return candidates[0]


@functools.cache
def kinds() -> Mapping[str, frozenset[str]]:
    """kind -> the nouns of things of that kind (config/benchmarks/droc/common_sense.yaml)."""
    raw = load_yaml(config_path("benchmarks/droc/common_sense.yaml")).get("kinds") or {}
    return {str(k): frozenset(str(w) for w in v) for k, v in raw.items()}


def is_a(name: str, word: str) -> bool:
    """Whether the thing ``name`` is what ``word`` names: its own noun, or a kind it is of ('pear' is fruit)."""
    word, noun = word.lower().strip(), (name.lower().split() or [""])[-1]
    forms = {word, word[:-1]} if word.endswith("s") else {word}  # "fruits", "cups"
    return any(noun == w or name.lower() == w or noun in kinds().get(w, frozenset()) for w in forms)


def world_of(prompt: str) -> str:
    """The world a console prompt's API is for: 'household' (it offers list_objects) or 'tabletop'."""
    return "household" if "def list_objects(" in prompt else "tabletop"


def looks_taken(transcript: Transcript) -> dict[str, list[str]]:
    """Each look statement typed (as typed, e.g. "list_objects('table')") -> the names the console answered."""
    out: dict[str, list[str]] = {}
    entries = transcript.entries
    for entry, after in zip(entries, entries[1:], strict=False):
        if entry.kind != "code" or after.kind != "output" or not is_look(entry.text):
            continue
        try:
            value = ast.literal_eval(after.text.strip())
        except (ValueError, SyntaxError):
            value = []
        out[entry.text.strip()] = [str(v) for v in value] if isinstance(value, list) else []
    return out


def is_look(statement: str) -> bool:
    """Whether ``statement`` only looks (lists objects or locations)."""
    return bool(re.match(rf"^\s*(?:{'|'.join(LOOKS)})\(", statement))


def names_right_object(text: str, obj: str) -> bool:
    """Whether ``text`` names ``obj`` other than as something ruled out ("not the <obj>")."""
    return any(not _ruled_out_at(text, m.start()) for m in re.finditer(rf"\b{re.escape(obj)}\b", text, re.I))


def ruled_out(text: str, obj: str) -> bool:
    """Whether ``text`` rules ``obj`` out: "not the milk", "I don't drink milk", "no milk"."""
    return any(_ruled_out_at(text, m.start()) for m in re.finditer(rf"\b{re.escape(obj)}\b", text, re.I))


def _ruled_out_at(text: str, start: int) -> bool:
    before = text[max(0, start - 40): start]
    clause = re.split(r"[.;,!?]", before)[-1]
    return bool(re.search(r"\b(?:not|no|never|don't|doesn't|do not|does not)\b(?:\s+\w+){0,2}\s*$", clause, re.I))


class RequestReader:
    """Reads one request in ``world`` (see the module docstring); ``looks``: what the looks typed answered."""

    def __init__(self, world: str, looks: Mapping[str, list[str]], hints: Sequence[str] = (), guess: Guess = first) -> None:
        self.world, self.looks, self.hints, self.guess = world, looks, list(hints), guess

    def plan(self, request: str) -> tuple[Call, ...] | str:
        """The plan ``request`` asks for (empty when no reading fits), or the look to type first."""
        objects = self.looks.get(LISTING[self.world])
        if objects is None:
            return LISTING[self.world]
        said = re.sub(r"[.!?]+$", "", request.strip().lower())
        found = CLEAR.match(said) if self.world == "household" else None
        if found:
            place = found.group("p")
            look = f"list_objects({place!r})"
            if look not in self.looks:
                return look
            steps: list[tuple[str, dict[str, str]]] = []
            for thing in self.looks[look]:
                steps += [("grasp", {"object_name": thing}), ("place_object", {"location": WHERE})]
            return self._finish(tuple(Call(skill, fields) for skill, fields in steps), place)
        for where, pattern, template in READINGS:
            match = re.match(pattern, said) if where in ("", self.world) else None
            if match is None:
                continue
            groups = {k: v for k, v in match.groupdict().items() if v}
            calls = []
            for skill, fields in template:
                values = {}
                for name, group in fields.items():
                    if group == WHERE:
                        values[name] = WHERE
                        continue
                    words = next(groups[g] for g in group.split("|") if g in groups)
                    values[name] = self.which(words, objects) if name in ("object_name", "target_name") else words
                calls.append(Call(skill, values))
            return self._finish(tuple(calls), "")
        return ()

    def which(self, words: str, objects: Sequence[str]) -> str:
        """The listed thing ``words`` mean; ``words`` when none fits."""
        words = words.strip()
        if words in objects:
            return words
        noun = words.split()[-1] if words.split() else words
        candidates = [o for o in objects if is_a(o, noun)]
        for hint in self.hints:
            left = [o for o in candidates if not ruled_out(hint, o)]
            named = [o for o in left if names_right_object(hint, o)]
            if named:
                return min(named, key=lambda o: hint.lower().find(o.lower()))
            candidates = left or candidates
        if not candidates:
            return words
        return candidates[0] if len(candidates) == 1 else self.guess(words, candidates)

    def where(self, thing: str, given: str, source: str) -> str | None:
        """Where ``thing`` goes: ``given`` (the request's place) unless a hint calls it full or says another
        place instead; else what a hint says things of its kind go on; else a guess among the listed
        locations (None: they must be listed first)."""
        full = {m.group(1).lower() for hint in self.hints for m in FULL.finditer(hint)}
        for hint in self.hints:
            instead = INSTEAD.search(hint)
            if instead and (not given or given in full):
                return instead.group(1).lower()
            for what, place in GOES.findall(hint):
                if is_a(thing, what.split()[-1]) and place.lower() not in full and not (given and given != place.lower()):
                    return place.lower()
        if given:
            return given
        locations = self.looks.get("list_locations()")
        if locations is None:
            return None
        options = [p for p in locations if p not in ("person", source) and p not in full]
        return self.guess(f"where {thing}", options) if options else source

    def _finish(self, calls: tuple[Call, ...], source: str) -> tuple[Call, ...] | str:
        """The destinations filled in and what must come first put first, or the look that needs."""
        out: list[Call] = []
        for call in calls:
            if call.skill == "place_object":
                held = next((c.fields["object_name"] for c in reversed(out) if c.skill == "grasp"), "")
                given = "" if call.fields.get("location") == WHERE else str(call.fields.get("location", ""))
                place = self.where(held, given, source)
                if place is None:
                    return "list_locations()"
                call = Call(call.skill, {**call.fields, "location": place})
            if call.skill == "grasp":
                for hint in self.hints:
                    for container in (m.group(1).lower() for m in OPEN_FIRST.finditer(hint)):
                        look = f"list_objects({container!r})"
                        if look not in self.looks:
                            return look
                        opened = any(c.skill == "open" and c.fields.get("thing") == container for c in out)
                        if call.fields["object_name"] in self.looks[look] and not opened:
                            out.append(Call("open", {"thing": container}))
            out.append(call)
        return tuple(out)
