"""The improvement chain with a scripted improvement LLM: the problem verdict, each discard rule,
validation, the deadline, ablations."""

from __future__ import annotations

import time

import pytest
from timing import timeout

from teachbot.language.registry import RobotApi
from teachbot.learning.improver import Improver, parse_verdict
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


def test_the_consoles_answer_to_a_correction_may_stand_before_the_learn_call(api):
    """The correction handler's note, the re-run it typed and its result: still right after the person's words."""
    for answer in ("# correction: plan-level, about the initial request: Use the green block.",
                   "# correction: skill-level, about the last action: put_first_on_second('red block', 'blue bowl') again "
                   "with grasp_height_offset=0.01 (was 0)\n>>> put_first_on_second('red block', 'blue bowl', "
                   "grasp_height_offset=0.01)\n'success'"):
        text = WRONG.replace(">>> learn_from_interaction()", f"{answer}\n>>> learn_from_interaction()")
        model = ScriptedModel([*ANSWERS, f"```\n{IMPROVED}\n```"])
        lesson = Improver(model, api).learn(text)
        assert lesson.ok, lesson.reason
        assert answer.splitlines()[0] in model.prompts[0]  # the improvement model sees the console's answer
    text = WRONG.replace(">>> learn_from_interaction()", ">>> say('ok')\n# correction: plan-level, about x: y\n"
                                                             ">>> learn_from_interaction()")
    assert "directly follow" in Improver(ScriptedModel([]), api).learn(text).reason  # the LLM's own statement in between


def test_discarded_when_the_call_does_not_follow_the_person(api):
    text = WRONG.replace(">>> learn_from_interaction()", ">>> say('ok')\n>>> learn_from_interaction()")
    model = ScriptedModel([])
    lesson = Improver(model, api).learn(text)
    assert not lesson.ok and "directly follow what the person said" in lesson.reason
    assert model.prompts == []


def test_discarded_when_there_is_no_problem(api):
    lesson = Improver(ScriptedModel(["NO PROBLEM"]), api).learn(WRONG)
    assert not lesson.ok and "found no problem" in lesson.reason and "not JSON" in lesson.reason
    verdict = 'The person only thanked the robot.\n```json\n{"problem": false, "description": "All went well."}\n```'
    model = ScriptedModel([verdict])
    lesson = Improver(model, api).learn(WRONG)
    assert not lesson.ok and lesson.reason == "the improvement model found no problem in this interaction"
    assert len(model.prompts) == 1 and '{"problem": true, "description":' in model.prompts[0]


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


GRASP = "There is no problem with the grasp, but the robot took the wrong block."
VERDICTS = [
    # (the model's answer, problem?, description, read from JSON?)
    ('```json\n{"problem": true, "description": "The robot took the red block. It guessed."}\n```', True,
     "The robot took the red block.", True),
    ('<think>\nThe person wanted green; the robot took red. So {"problem": yes}?\n</think>\n'
     '{"problem": true, "description": "The robot took the wrong block."}', True, "The robot took the wrong block.", True),
    ('Looking at the interaction, the robot did not ask which block was meant.\n\n'
     '{"problem": true, "description": "The robot did not ask which block the person meant."}', True,
     "The robot did not ask which block the person meant.", True),
    ("{'problem': True, 'description': \"The robot's choice of block was a guess.\"}", True,
     "The robot's choice of block was a guess.", True),
    ("{'problem': false, 'description': 'The robot did what was asked.'}", False, "The robot did what was asked.", True),
    ('{"problem": false, "description": "It is true that the person changed their mind.", "confidence": null}', False,
     "It is true that the person changed their mind.", True),
    ('Verdict:\n```\n{"problem": "yes", "description": "The robot used the wrong bowl."}\n```\nHope this helps!', True,
     "The robot used the wrong bowl.", True),
    ('{"problem": false,\n  "description": "No problem here.",\n}', False, "No problem here.", True),
    ("NO PROBLEM", False, "", False),
    ("No problem.", False, "", False),
    ("**NO PROBLEM**", False, "", False),
    (GRASP, True, GRASP, False),
    ("No problem was visible in the grasp, yet the person meant the green block. The rest was fine.", True,
     "No problem was visible in the grasp, yet the person meant the green block.", False),
    ("<think>Is anything wrong? Hmm. No problem with speed.</think>\nProblem: The robot ignored the colour. Details follow.",
     True, "The robot ignored the colour.", False),
    ("I am not sure what to say about {this interaction", True, "I am not sure what to say about {this interaction", False),
]


@pytest.mark.parametrize(("answer", "problem", "description", "structured"), VERDICTS)
def test_the_problem_verdict_is_read_from_realistic_answers(answer, problem, description, structured):
    verdict = parse_verdict(answer)
    assert (verdict.problem, verdict.description, verdict.structured) == (problem, description, structured)


def test_an_empty_or_undescribed_verdict_learns_nothing(api):
    for answer, needle in (("<think>The person is unhappy because", "gave no answer"),
                           ('{"problem": true}', "said there is a problem but not which")):
        model = ScriptedModel([answer])
        lesson = Improver(model, api).learn(WRONG)
        assert not lesson.ok and needle in lesson.reason and len(model.prompts) == 1


def test_an_unstructured_verdict_is_a_problem_and_the_lesson_says_so(api):
    model = ScriptedModel([GRASP, *ANSWERS[1:], f"```\n{IMPROVED}\n```"])
    lesson = Improver(model, api).learn(WRONG)
    assert lesson.ok and lesson.problem == GRASP and lesson.notes and "not JSON" in lesson.notes[0]
    assert GRASP in model.prompts[1]


class Slow(ScriptedModel):
    """Scripted answers; step ``slow_step`` (1-based) sleeps ``pause`` seconds; records each timeout."""

    def __init__(self, answers: list[str], slow_step: int = 0, pause: float = 0.0) -> None:
        super().__init__(respond=self._answer)
        self.answers, self.slow_step, self.pause = list(answers), slow_step, pause
        self.timeouts: list[float | None] = []

    def generate(self, prompt, stop=None, **kwargs):
        self.timeouts.append(kwargs.get("timeout"))
        return super().generate(prompt, stop, **kwargs)

    def _answer(self, prompt: str) -> str:
        if len(self.prompts) == self.slow_step:
            time.sleep(self.pause)
        return self.answers[len(self.prompts) - 1]


CHAIN = [*ANSWERS, f"```python\n{IMPROVED}\n```"]


def test_the_chain_stops_at_its_deadline_and_calls_the_model_no_more(api):
    model = Slow(CHAIN, slow_step=2, pause=0.5)
    lesson = Improver(model, api).learn(WRONG, deadline=time.monotonic() + 0.3)
    assert not lesson.ok and "ran past its deadline of 0.3 s; nothing was stored" in lesson.reason
    assert len(model.prompts) == 2
    assert lesson.problem == "The robot picked the red block although the person meant the green one." and not lesson.transcript


def test_a_passed_deadline_calls_no_model_and_each_call_gets_the_time_left(api):
    model = Slow(CHAIN)
    lesson = Improver(model, api).learn(WRONG, deadline=time.monotonic() - 1.0)
    assert not lesson.ok and "deadline had passed before it started" in lesson.reason and model.prompts == []
    lesson = Improver(model, api).learn(WRONG, deadline=time.monotonic() + timeout(30.0))
    assert lesson.ok, lesson.reason
    assert len(model.timeouts) == 4 and all(t is not None and 0 < t <= 30.0 for t in model.timeouts)
    assert model.timeouts == sorted(model.timeouts, reverse=True)
    untimed = Slow(CHAIN)
    assert Improver(untimed, api).learn(WRONG).ok and untimed.timeouts == [None] * 4


def test_cancelled_stops_the_chain(api):
    model = Slow(CHAIN)
    lesson = Improver(model, api).learn(WRONG, cancelled=lambda: len(model.prompts) >= 1)
    assert not lesson.ok and "cancelled; nothing was stored" in lesson.reason and len(model.prompts) == 1


SCENE = ["red block", "green block", "blue bowl"]


def test_an_improved_transcript_must_start_with_the_persons_request(api):
    other = IMPROVED.replace("put the block in the bowl", "put the green block in the bowl")
    lesson = Improver(ScriptedModel([*ANSWERS, other]), api).learn(WRONG, scene_objects=SCENE)
    assert not lesson.ok
    assert "does not start with the person's request 'put the block in the bowl'" in lesson.reason
    assert "'put the green block in the bowl'" in lesson.reason
    same = IMPROVED.replace("put the block in the bowl", "Put the  block in the bowl")  # case and spacing
    assert Improver(ScriptedModel([*ANSWERS, same]), api).learn(WRONG, scene_objects=SCENE).ok


def test_an_improved_transcript_may_name_only_scene_objects(api):
    invented = IMPROVED.replace("put_first_on_second('green block', 'blue bowl')", "put_first_on_second('purple block', 'blue bowl')")
    lesson = Improver(ScriptedModel([*ANSWERS, invented]), api).learn(WRONG, scene_objects=SCENE)
    assert not lesson.ok and "names 'purple block', not in the scene (red block, green block, blue bowl)" in lesson.reason
    # without a scene the object check is skipped
    assert Improver(ScriptedModel([*ANSWERS, invented]), api).learn(WRONG).ok


def test_scene_objects_corners_and_spoken_words_are_accepted(api):
    good = IMPROVED.replace(
        ">>> put_first_on_second('green block', 'blue bowl')\n'success'",
        ">>> put_first_on_second('green block', 'blue bowl')\n'success'\n"
        ">>> put_first_on_second('red block', denormalize_xy(get_obj_pos('top left corner')))\n'success'\n"
        ">>> blocks = [name for name in get_obj_names() if 'block' in name]\n"
        ">>> say(f'I moved the {blocks[0]} and left the purple block alone.')\n"
        ">>> say('The green block is in the blue bowl; the pink bowl is not here.')",
    )
    model = ScriptedModel([*ANSWERS, f"Here is the improved interaction:\n```python\n{good}\n```"])
    lesson = Improver(model, api).learn(WRONG, scene_objects=SCENE)
    assert lesson.ok, lesson.reason
    assert lesson.transcript == good
    assert "The objects the robot knew in this scene: red block, green block, blue bowl." in model.prompts[3]
