"""Issue 28 item 4: each case's verdict checked by the simulator, not by the precond baseline's checks.

The checker (teachbot.evaluation.raider_groundtruth) sets up the case's scene in the simulated world and
attempts the action through the real skills; the case agrees when the action fails for the case's reason (or
succeeds, for IN; each candidate succeeds, for IA). A seeded sample and the cases the simulator once disagreed with
run in ``make test``; every case runs in ``make test-slow``. Every case must agree: there is no list of allowed
disagreements (a case the simulator contradicts is fixed, or the skill that silently did it is).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

import numpy as np
import pytest
import yaml

from teachbot.evaluation.raider_cases import CaseWorlds, load_cases
from teachbot.evaluation.raider_groundtruth import reason_of, sim_verdict

# the three cases the simulator contradicted before issue 28's item 1, and what it shows now
ONCE_DISAGREED = {
    "hh-iu1-03": ("IU1", "cannot reach"),  # the bread was at the workbench's side, which the skill steps along to reach
    "tt-iu2-03": ("IU2", "no room for the gripper's fingers"),  # the pick pushed the one neighbour 3 cm aside
    "tt-iu2-04": ("IU2", "'blue block' rests on it"),  # the red block went on the blue block on top, reported as success
}
SAMPLE = 30


@pytest.fixture(scope="module")
def worlds():
    with CaseWorlds() as w:
        yield w


def disagreements(cases, worlds) -> dict[str, str]:
    found = {}
    for case in cases:
        verdict = sim_verdict(case, worlds)
        assert verdict.issue_type == case.issue_type
        if not verdict.agrees:
            found[case.id] = f"shown {verdict.shown or 'nothing'}: {verdict.why}"
    return found


def test_a_seeded_sample_of_cases_agrees_with_the_simulator(worlds):
    cases = load_cases()
    sample = random.Random(28).sample(cases, SAMPLE)
    assert len({c.issue_type for c in sample}) == 8  # every type in the sample
    assert disagreements(sample, worlds) == {}


def test_the_cases_the_simulator_once_contradicted_agree_for_their_reason(worlds):
    cases = {c.id: c for c in load_cases()}
    for case_id, (shown, words) in ONCE_DISAGREED.items():
        verdict = sim_verdict(cases[case_id], worlds)
        assert verdict.agrees and verdict.shown == shown, verdict
        assert words in verdict.why, verdict.why
    # the bread moved to the table's far edge is out of reach only: nothing within the fingers' clearance of it
    assert worlds.tools_for(cases["hh-iu1-03"]).check_obj_relationship("blocking", "bread") == "Nothing is blocking bread."


def test_the_distance_after_the_drive_is_from_where_the_skill_stands(worlds):
    """dist_to_target counts the step grasp takes along a wide place to face a thing at its side: an apple at the
    counter's right end, out of reach from the counter's middle, is reported within reach (grasp reaches it); one in
    the counter's far right corner is still reported beyond reach (grasp cannot reach it)."""
    base = {c.id: c for c in load_cases()}["hh-in-01"]  # grasp(apple), the robot at its start pose
    reach = worlds.config.reach["household"]
    for offset, reached in (([0.05, -0.5], True), ([0.22, -0.52], False)):
        scene = yaml.safe_dump({"objects": [{"name": "apple", "type": "apple", "at": "counter", "offset": offset}]})
        case = replace(base, scene=scene)
        tools = worlds.tools_for(case)
        layout, apple = tools.layout, tools.queries.object("apple").position
        middle = layout.base.arm_origin(*layout.location_pose("counter"))
        assert np.linalg.norm(apple - middle) > reach  # from the counter's middle both are out of reach
        answer = tools.dist_to_target("apple")
        after = float(re.findall(r"([\d.]+) m from the arm's base", answer)[-1])
        assert (after <= reach) == reached and tools.reachable("apple") == reached, answer
        assert "after move_to('counter') and the skills' 0.32 m step to the robot's right" in answer, answer
        verdict = sim_verdict(case, worlds)  # the skill's outcome agrees with the fact
        assert verdict.shown == ("IN" if reached else "IU1"), verdict
        assert reached or "cannot reach" in verdict.why, verdict.why


@pytest.mark.slow
def test_every_case_agrees_with_the_simulator(worlds):
    assert disagreements(load_cases(), worlds) == {}


def test_a_wrong_verdict_is_caught_by_the_simulator(worlds):
    cases = {c.id: c for c in load_cases()}
    feasible = replace(cases["hh-in-01"], issue_type="IU1", expected="unfeasibility")  # grasp(apple), within reach
    verdict = sim_verdict(feasible, worlds)
    assert not verdict.agrees and verdict.shown == "IN" and verdict.why == "grasp('apple') -> success"
    far = replace(cases["tt-iu1-04"], issue_type="IU5")  # the block is out of reach, not of the wrong kind
    verdict = sim_verdict(far, worlds)
    assert not verdict.agrees and verdict.shown == "IU1" and "outside the workspace" in verdict.why
    ambiguous = replace(cases["hh-ia-01"], grounding=("red cup", "pear"))  # one candidate is not in the world
    verdict = sim_verdict(ambiguous, worlds)
    assert not verdict.agrees and "fewer than two candidates" in verdict.why
    right = sim_verdict(cases["hh-iu2-06"], worlds)  # milk in the closed fridge
    assert right.agrees and right.shown == "IU2" and "which is closed" in right.why


def test_the_reasons_of_the_skills_error_lines():
    assert reason_of("ValueError: unknown object 'pear'. Use one of list_objects() ['apple']") == "IU3"
    assert reason_of("RuntimeError: already holding 'red block'; place it or open the gripper first") == "IU6"
    assert reason_of("RuntimeError: the right hand holds nothing to hand over; grasp(...) an object first") == "IU6"
    assert reason_of("ValueError: 'milk' is in the fridge, which is closed; open('fridge') first") == "IU2"
    assert reason_of("RuntimeError: cannot pick 'green block': 'blue block' rests on it; move that first") == "IU2"
    assert reason_of("RuntimeError: 'green block' at (-0.520, -0.750, 0.020) is outside the workspace x in [-0.3, 0.3]") == "IU1"
    assert reason_of("RuntimeError: cannot pick 'yellow bowl': bowls are fixed to the table; pick a block instead") == "IU5"
    assert reason_of("ValueError: cannot wipe the sink: choose one of table, counter, workbench") == "IU5"
    assert reason_of("RuntimeError: the motion timed out") == ""
