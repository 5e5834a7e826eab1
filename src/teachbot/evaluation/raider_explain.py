"""Expl, scored honestly: the explanation gives the case's reason (its issue type) and the facts that decide it.

The RAIDER paper counts an explanation as a success when it gives the correct issue explanation. Here an
explanation scores when (1) the verdict is right, (2) it states the reason of the case's issue type in words
specific to that reason (:data:`REASONS`: "out of reach" or "beyond its 0.85 m reach" for IU1, or in numbers,
"1.2 m away, the arm reaches 0.85 m"; "blocked" for IU2, "not present" for IU3, "already open" for IU4, "not
pickable" for IU5, "the hand is full" for IU6, "could be either" for IA), not negated ("nothing blocks it"
states no obstruction), (3) it mentions every key fact of the case as whole words (the objects, and the state,
holder or blocker; :func:`fact_score`) and (4) it does not hedge over many reasons: it states at most one
unfeasibility reason besides the right one. For IN it states no issue at all and mentions the objects. A wrong
reason therefore fails whatever the objects: "The plate is too far away to grasp" states IU1, not IU5's wrong
property. :func:`reasons` tells which reasons an explanation states (also what the report counts as the issue
type a method gave). Pure Python.
"""

from __future__ import annotations

import re

from teachbot.evaluation.raider_cases import RaiderCase, fact_score

_LENGTH = r"\d+(?:\.\d+)? ?(?:m|cm|metres?|meters?)"
# "the arm's reach", "its reach", "its 0.85 m reach", "the robot's 85 cm workspace"
_REACH = rf"(?:(?:the|its) )?(?:(?:robot|arm)(?:'s)? )?(?:{_LENGTH} )?(?:reach|workspace)"
# the reach limit given as a length: "reaches (only) 0.85 m", "a reach of 0.85 m", "its 0.85 m reach"
_REACH_LIMIT = (r"\breach(?:es)?(?: only| at most| up to)? (\d+(?:\.\d+)?) ?(m|cm|metres?|meters?)\b",
                r"\breach (?:is|of)(?: only| at most)? (\d+(?:\.\d+)?) ?(m|cm|metres?|meters?)\b",
                r"\b(\d+(?:\.\d+)?) ?(m|cm|metres?|meters?) (?:of )?reach\b")
# how far the thing is: "1.2 m away", "1.20 m from the arm's base", "at 1.2 m"
_DISTANCE = (r"\b(\d+(?:\.\d+)?) ?(m|cm|metres?|meters?) (?:away|from)\b", r"\bat (\d+(?:\.\d+)?) ?(m|cm|metres?|meters?)\b")
# Per issue type: (pattern, the pattern states the reason even after a negation word[, weak]). Patterns are matched
# on the lower-cased explanation; a match with "no", "not", "nothing", "without", "never" or "n't" shortly before
# it, in the same clause, is negated and states nothing (unless the pattern is itself a negative statement). A weak
# pattern describes the scene ("on top of", "is open"): it states the reason of an issue case, but is no claim of
# an issue in an IN case's explanation.
REASONS: dict[str, tuple[tuple[str, bool] | tuple[str, bool, bool], ...]] = {
    "IA": ((r"\bambigu\w*", False), (r"\bcould (?:be|mean|refer to)\b", False), (r"\b(?:which one|which of)\b", False),
           (r"\b(?:several|multiple|more than one|two or more)\b", False), (r"\beither\b", False),
           (r"\bboth\b[^.;]*\bmatch", False), (r"\bunclear which\b", True)),
    "IU1": ((rf"\bout of {_REACH}", False), (rf"\bbeyond {_REACH}", False), (r"\btoo far\b", False),
            (r"\bunreachable\b", False), (rf"\b(?:not|isn't|is not) (?:within|in) {_REACH}", True),
            (r"\b(?:cannot|can't|can not|unable to) reach\b", True), (r"\bnot reachable\b", True),
            (rf"\boutside {_REACH}", False), (r"\btoo (?:high|low)\b", False)),
    "IU2": ((r"\bblock(?:s|ed|ing)\b", False), (r"\bobstruct\w*", False), (r"\bin the way\b", False),
            (r"\bcovered\b", False), (r"\boccupied\b", False), (r"\b(?:is|are|sits|rests|lies) on (?:top of )?it\b", False),
            (r"\bon top of\b", False, True), (r"\binside\b[^.;]*\bclosed\b", False), (r"\bclosed\b[^.;]*\binside\b", False),
            (r"\b(?:must|needs to|has to|should) be opened\b", False), (r"\btoo close\b", False)),
    "IU3": ((r"\bnot (?:present|found|in the (?:scene|room|kitchen|house|list)|visible|detected|available|there|seen|"
             r"listed|among)\b", True),
            (r"\b(?:cannot|can't|could not|couldn't|can not|unable to|did not|didn't) (?:find|see|detect|locate)\b", True),
            (r"\b(?:does not|doesn't|do not|don't) exist\b", True), (r"\bmissing\b", False), (r"\babsent\b", False),
            (r"\bno (?:such )?(?:\w+ ){0,2}(?:is |are )?(?:present|in the scene|in sight|visible|detected|here|around|"
             r"available|anywhere|on the table|in the room|in the kitchen|among|to be found)\b", True),
            (r"\bthere (?:is|are) no (?!(?:issue|problem|obstruct|block|need|reason|other|way|ambigu))", True),
            (r"\bnothing (?:called|named|that is)\b", True)),
    "IU4": ((r"\balready\b", False),
            (r"(?<!hand )(?<!gripper )\bis (?:not |n't )?(?:dirty|clean|sliced|unsliced|whole|open|closed|empty|full|"
             r"filled|switched on|switched off|turned on|turned off)\b", True, True),
            (r"\b(?:not|isn't) (?:clean|sliced|open|closed|switched|turned)\b", True, True), (r"\bdirty\b", False, True),
            (r"\b(?:no need|nothing to do|would change nothing|pointless|no effect)\b", True)),
    "IU5": ((r"\b(?:not |non-?|un)(?:pickable|pickeable|graspable|liftable|openable|sliceable|togglable|toggleable|"
             r"switchable|cleanable|wipeable|movable)\b", True),
            (r"\b(?:too|very) (?:heavy|big|large|wide|bulky|flat|thin)\b", False),
            (r"\b(?:has|have) no (?:switch|door|lid|handle|power)\b", True),
            (r"\bnot (?:designed|meant|made|something)\b", True), (r"\bnot a (?:container|device|appliance|food|fruit)\b", True),
            (r"\b(?:does not|doesn't|cannot|can't) (?:be )?(?:open(?:ed)?|switch(?:ed)?|toggle[d]?|slice[d]?|turn(?:ed)? on)"
             r"\b[^.;]*\b(?:because|as|since) it is an? \w+", True),
            (r"\bcommon sense\b", False), (r"\bmakes no sense\b", True), (r"\b(?:furniture|fixture|fixed in place|immovable)\b", False)),
    "IU6": ((r"\bhand (?:is )?(?:full|occupied|busy|not free|empty)\b", True), (r"\bgripper (?:is )?(?:full|occupied|empty)\b", True),
            (r"\b(?:not|isn't|is not) holding\b", True), (r"\bhold(?:s|ing) nothing\b", True), (r"\bempty[- ]hand", True),
            (r"\balready holding\b", False), (r"\bholding (?:the |a |an )?[\w ]{1,20}?, not\b", True),
            (r"\b(?:needs|requires|must hold|without) (?:a |the )?(?:knife|sponge)\b", True),
            (r"\b(?:needs to|must|has to|would have to) (?:first )?(?:put down|release|drop|place|hold)\b", False),
            (r"\b(?:nothing|no object) (?:in (?:its|the) (?:hand|gripper)|to (?:place|hand over|put down))\b", True),
            (r"\bis holding\b[^.;]*\b(?:instead|first|needs|must)\b", False)),
}
CLAIMS_ISSUE = re.compile(r"\b(?:cannot|can't|can not|unable|impossible|not possible|unfeasib\w*|infeasib\w*|not feasible)\b")
NEGATION = re.compile(r"\b(?:no|not|nothing|without|never|nor|neither|none)\b|n't\b")
NEGATION_SPAN = 24  # characters before a match where a negation word cancels it (within the clause)


def _states(text: str, pattern: str, negative: bool) -> bool:
    for m in re.finditer(pattern, text):
        if negative:
            return True
        before = re.split(r"[.;:,!?]|\b(?:but|and|while|although)\b", text[max(0, m.start() - NEGATION_SPAN): m.start()])[-1]
        if not NEGATION.search(before):
            return True
    return False


def _metres(value: str, unit: str) -> float:
    return float(value) / (100.0 if unit == "cm" else 1.0)


def beyond_stated_reach(explanation: str) -> bool:
    """The explanation gives the reach limit as a length and the thing as farther than that: "1.2 m away, the arm
    reaches 0.85 m" (IU1 in numbers); a distance within the stated reach ("0.6 m away, within its 0.85 m reach")
    states no reach issue."""
    text = " ".join(explanation.lower().split())
    limits = [_metres(*m.groups()) for p in _REACH_LIMIT for m in re.finditer(p, text)]
    if not limits:
        return False
    limit_spans = {m.span() for p in _REACH_LIMIT for m in re.finditer(p, text)}
    distances = [_metres(*m.groups()) for p in _DISTANCE for m in re.finditer(p, text) if m.span() not in limit_spans]
    return any(d > max(limits) for d in distances)


def reasons(explanation: str, strong: bool = False) -> list[str]:
    """The issue types whose reason ``explanation`` states (IA and IU1..IU6, in that order; none for a plain 'no
    issue'); with ``strong``, by the patterns that claim an issue only, not the weak ones that describe the scene.
    IU1 is also stated in numbers: a distance beyond the reach limit the explanation gives (:func:`beyond_stated_reach`)."""
    text = " ".join(explanation.lower().split())
    return [kind for kind, patterns in REASONS.items()
            if any(_states(text, p[0], p[1]) for p in patterns if not (strong and len(p) > 2 and p[2]))
            or (kind == "IU1" and beyond_stated_reach(text))]


def states_reason(case: RaiderCase, explanation: str) -> bool:
    """The explanation states the case's reason: its issue type's (at most one other unfeasibility reason
    beside it), or for IN none at all and no claim that the action cannot be done."""
    if case.issue_type == "IN":
        return not reasons(explanation, strong=True) and not CLAIMS_ISSUE.search(explanation.lower())
    found = reasons(explanation)
    others = [k for k in found if k != case.issue_type and k != "IA"]
    return case.issue_type in found and len(others) <= 1


def explained(case: RaiderCase, verdict: str, explanation: str) -> bool:
    """Expl: the right verdict, the case's reason and every key fact."""
    return verdict == case.expected and states_reason(case, explanation) and fact_score(case, explanation) == 1.0
