"""The improvement chain with a scripted improvement LLM: each discard rule, validation, ablations."""

from __future__ import annotations

import pytest

from teachbot.console.registry import RobotApi
from teachbot.learning.improver import Improver
from teachbot.llm.scripted import ScriptedModel

WRONG = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'no, I meant the green block. Remember that next time.'}
>>> learn_from_interaction()"""

IMPROVED = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the bowl'}
>>> get_obj_names()
['blue bowl', 'green block', 'red block']
>>> ask('Which block do you mean?')
{'type': 'dialog', 'text': 'the green block'}
>>> put_first_on_second('green block', 'blue bowl')
'success'
>>> wait_for_trigger()"""

ANSWERS = [
    "The robot picked the red block although the person meant the green one. It guessed.",
    "When several blocks fit a request, ask which one the person means.",
    "Whenever the request names no colour.",
]


@pytest.fixture(scope="module")
def api():
    return RobotApi.load("tabletop")


def test_a_correction_becomes_an_improved_example(api):
    model = ScriptedModel([*ANSWERS, f"```\n{IMPROVED}\n```"])
    lesson = Improver(model, api).learn(WRONG)
    assert lesson.ok, lesson.reason
    assert lesson.problem == "The robot picked the red block although the person meant the green one."
    assert lesson.improvement == ANSWERS[1] and lesson.reason == ANSWERS[1]
    assert lesson.scope == ANSWERS[2]
    assert lesson.transcript == IMPROVED
    assert "no, I meant the green block" in model.prompts[0]
    assert "How can the robot do better" in model.prompts[1] and ANSWERS[0].split(".")[0] in model.prompts[1]


def test_discarded_when_the_call_does_not_follow_the_person(api):
    text = WRONG.replace(">>> learn_from_interaction()", ">>> say('ok')\n>>> learn_from_interaction()")
    model = ScriptedModel([])
    lesson = Improver(model, api).learn(text)
    assert not lesson.ok and "directly follow what the person said" in lesson.reason
    assert model.prompts == []


def test_discarded_when_there_is_no_problem(api):
    lesson = Improver(ScriptedModel(["NO PROBLEM"]), api).learn(WRONG)
    assert not lesson.ok and "found no problem" in lesson.reason


def test_discarded_when_the_improved_transcript_equals_the_input(api):
    original = WRONG.rsplit("\n>>> learn_from_interaction()", 1)[0]
    lesson = Improver(ScriptedModel([*ANSWERS, original]), api).learn(WRONG)
    assert not lesson.ok and "same as the original" in lesson.reason


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (IMPROVED.replace(">>> get_obj_names()", ">>> import os\n>>> get_obj_names()"), "imports a module"),
        (IMPROVED.replace("get_obj_names()", "list_all_things()"), "list_all_things(), which is not in the tabletop robot API"),
        (IMPROVED + "\n>>> learn_from_interaction()", "learn_from_interaction(), which an example must not contain"),
        ("Sorry, I cannot write that.", "no >>> statement"),
    ],
)
def test_validation_rejects_bad_improved_transcripts(api, bad, needle):
    lesson = Improver(ScriptedModel([*ANSWERS, bad]), api).learn(WRONG)
    assert not lesson.ok and needle in lesson.reason


def test_ablations(api):
    off = Improver(ScriptedModel([]), api, mode="off").learn(WRONG)
    assert not off.ok and "switched off" in off.reason
    raw = Improver(ScriptedModel([]), api, mode="store_raw").learn(WRONG)
    assert raw.ok and raw.transcript == WRONG.rsplit("\n>>> learn_from_interaction()", 1)[0]
    with pytest.raises(ValueError, match="learning mode must be one of"):
        Improver(ScriptedModel([]), api, mode="sometimes")
