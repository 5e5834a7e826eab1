"""Expl is honest: an explanation scores only with the case's reason (its issue type) and its key facts. For
every case of the benchmark, the right reason with the facts scores and every other type's reason, about the
same objects, fails; loose words no longer match; Grnd counts the cases that need grounding only."""

from __future__ import annotations

import pytest

from teachbot.evaluation.raider_benchmark import corrections, grounding_score, score
from teachbot.evaluation.raider_cases import ISSUE_TYPES, RaiderCase, fact_score, load_cases, mentions
from teachbot.evaluation.raider_explain import explained, reasons
from teachbot.raider.agent import CheckResult

# One explanation per reason, about the case's main object (what a method might write for that type).
WRONG_REASON = {
    "IA": "The {x} is ambiguous: it could be either of two things that match.",
    "IN": "The robot can do it: the {x} is there and ready.",
    "IU1": "The {x} is too far away to grasp: it is out of the arm's reach.",
    "IU2": "The {x} is blocked by something in the way.",
    "IU3": "There is no {x} in the scene: it is not present.",
    "IU4": "The {x} is already in that state, so there is nothing to do.",
    "IU5": "The {x} is not pickable: it is too heavy for the gripper.",
    "IU6": "The robot's hand is full: it must put down what it is holding first.",
}
RIGHT_REASON = {
    "IA": "It is ambiguous: it could be either {facts}.",
    "IN": "The robot can do it: {facts} are there and free.",
    "IU1": "It is out of the arm's reach: {facts}.",
    "IU2": "It is blocked: {facts}.",
    "IU3": "Not present in the scene: {facts}.",
    "IU4": "Nothing to do, it is already so: {facts}.",
    "IU5": "Not pickable, not openable, not sliceable, not togglable, not cleanable: {facts}.",
    "IU6": "The robot's hand is not free, it is holding the wrong thing: {facts}.",
}


@pytest.fixture(scope="module")
def cases() -> list[RaiderCase]:
    return load_cases()


def main_object(case: RaiderCase) -> str:
    return case.grounding[0] if case.grounding else case.facts[0][0]


def test_whole_words_only():
    assert not mentions("The robot cannot find it", "no")
    assert not mentions("There is nothing here", "no")
    assert mentions("There is no kettle", "no kettle") and mentions("two red cups", "red cup")
    assert not mentions("the applesauce", "apple")


def test_the_plate_too_far_away_is_no_property_explanation(cases):
    case = next(c for c in cases if c.issue_type == "IU5" and "plate" in c.grounding)
    assert reasons("The plate is too far away to grasp") == ["IU1"]
    assert not explained(case, case.expected, "The plate is too far away to grasp")
    assert explained(case, case.expected, "The plate is not pickable: it is too wide for the gripper.")


def test_every_case_fails_with_any_wrong_reason_and_scores_with_its_own(cases):
    failures = []
    for case in cases:
        facts = " and ".join(fact[0] for fact in case.facts)
        right = RIGHT_REASON[case.issue_type].format(facts=facts)
        neutral = " and ".join(fact[0] for fact in case.facts if not any(reasons(alt) for alt in fact))
        if not explained(case, case.expected, right):
            failures.append(f"{case.id} ({case.issue_type}): the right reason failed: {right!r} states {reasons(right)}")
        for kind in ISSUE_TYPES:
            if kind == case.issue_type:
                continue
            # every fact that names no reason itself (the objects, the holder, the blocker) named, with a wrong reason
            wrong = WRONG_REASON[kind].format(x=main_object(case)) + " (" + neutral + ")"
            if explained(case, case.expected, wrong):
                failures.append(f"{case.id} ({case.issue_type}): the {kind} reason scored: {wrong!r}")
        if explained(case, "" if case.expected != "" else "none", right):
            failures.append(f"{case.id}: scored without a verdict")
    assert not failures, "\n".join(failures[:20])
    assert {c.issue_type for c in cases} == set(ISSUE_TYPES)


def test_hedging_over_every_reason_does_not_score(cases):
    case = next(c for c in cases if c.issue_type == "IU2")
    shotgun = " ".join(WRONG_REASON[k].format(x=main_object(case)) for k in ("IU1", "IU2", "IU5", "IU6"))
    shotgun += " " + " ".join(f[0] for f in case.facts)
    assert "IU2" in reasons(shotgun) and not explained(case, case.expected, shotgun)


def test_negated_reasons_state_nothing():
    assert reasons("Nothing is blocking the apple and it is not out of reach.") == []
    assert reasons("The robot can pick up the book without any issues.") == []
    assert reasons("The milk is inside the fridge, which is closed.")[0] == "IU2"


def test_grounding_is_scored_on_the_cases_that_need_it(cases):
    specific = next(c for c in cases if c.abstraction == "AS" and c.issue_type == "IN")
    result = CheckResult(specific.query, "none", "fine", list(specific.grounding))
    assert grounding_score(specific, result, specific.names()) is None  # named directly: no grounding to score
    relation = next(c for c in cases if c.abstraction == "AR" and c.issue_type != "IA")
    assert grounding_score(relation, CheckResult(relation.query, "none", "", list(relation.grounding)), relation.names())
    assert not grounding_score(relation, CheckResult(relation.query, "none", "", []), relation.names()) or not relation.grounding
    ambiguous = next(c for c in cases if c.issue_type == "IA")
    assert grounding_score(ambiguous, CheckResult(ambiguous.query, "ambiguity", "", []), ambiguous.names())  # detected
    assert not grounding_score(ambiguous, CheckResult(ambiguous.query, "none", "", list(ambiguous.grounding[:1])), ambiguous.names())
    s = score(ambiguous, CheckResult(ambiguous.query, "ambiguity", "It is ambiguous: could be " + " or ".join(ambiguous.grounding)),
              ambiguous.names())
    assert s.grnd and s.det and s.expl and s.stated == ["IA"] and fact_score(ambiguous, s.explanation) == 1.0


def test_warnings_corrected_count_from_the_turns():
    assert corrections([0, 1, 0, 2, 1, 0]) == (3, 2)  # the turn after the 2-warning turn drew one again
    assert corrections([1]) == (1, 0) and corrections([]) == (0, 0)


@pytest.mark.parametrize("right", [
    "The apple is beyond its 0.85 m reach.",
    "The apple is 1.2 m away, the arm reaches 0.85 m.",
    "The apple is 1.20 m from the arm's base; the robot has a reach of 0.85 m.",
    "The apple lies 120 cm away and the arm reaches only 85 cm.",
    "The apple is at 1.2 m, past the arm's 0.85 m reach.",
])
def test_the_reach_limit_worded_as_a_distance_states_out_of_reach(cases, right):
    case = next(c for c in cases if c.id == "hh-iu1-01")  # grasp(apple) on the table's far side
    assert reasons(right) == ["IU1"], right
    assert explained(case, case.expected, right)


@pytest.mark.parametrize("wrong", [
    "The apple is 0.6 m away, the arm reaches 0.85 m.",  # a distance within the stated reach: no reach issue
    "The apple is 0.6 m away, within its 0.85 m reach, but the plate is on top of it.",  # obstruction, not reach
    "The apple is 1.2 m away.",  # a distance without the limit it exceeds
    "The apple is not pickable, and the arm reaches 0.85 m.",  # a property
])
def test_a_distance_within_the_reach_or_another_reason_is_no_reach_explanation(cases, wrong):
    case = next(c for c in cases if c.id == "hh-iu1-01")
    assert "IU1" not in reasons(wrong), wrong
    assert not explained(case, case.expected, wrong)


def test_a_reach_in_numbers_is_a_wrong_reason_for_a_property_case(cases):
    case = next(c for c in cases if c.issue_type == "IU5" and "plate" in c.grounding)
    far = "The plate is 1.2 m away, the arm reaches 0.85 m."
    assert reasons(far) == ["IU1"] and not explained(case, case.expected, far)
