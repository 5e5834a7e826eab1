"""DROC's correction handler (teachbot.knowledge.correction, .grounding): plan- vs skill-level, the history
a correction depends on, grounding "a bit higher" in the object's scale and the declared ranges, the
re-run statement, the transcript note, and the safe plan-level fallback for every model failure.

The scripted models answer from the prompt: they read the person's words and the last skill call out of
it, so a prompt that loses either fails these tests; their answers come in the styles real models use
(bare JSON, fenced, prose around it, <think> reasoning first, Python-literal quotes)."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from teachbot.errors import ConfigError
from teachbot.knowledge.correction import Correction, CorrectionConfig, CorrectionHandler, SkillCall, read_dependence
from teachbot.knowledge.grounding import Grounded, ground, resolve
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import NOTE_PREFIX, Transcript
from teachbot.llm.base import LLMError
from teachbot.llm.scripted import ScriptedModel
from teachbot.robot_profile import RobotProfile
from teachbot.skills.parameters import SkillParameters

ROOT = Path(__file__).resolve().parents[1]
STYLES = ("bare", "fenced", "prose", "think", "python")
NOT_A_CORRECTION = {"correction": False, "level": "none", "history": "none", "skill": "", "object": "", "parameter": "",
                    "direction": "", "amount": "", "value": None, "constraint": ""}
SIZES = {"red cup": (0.08, 0.08, 0.08), "apple": (0.08, 0.08, 0.08), "milk": (0.07, 0.07, 0.18),
         "red block": (0.04, 0.04, 0.04)}


# ---------------------------------------------------------------------------------------------- doubles
def styled(answer: Mapping[str, Any], style: str) -> str:
    """``answer`` written the way some real model writes it."""
    text = json.dumps(answer)
    return {
        "bare": text,
        "fenced": f"```json\n{text}\n```",
        "prose": f"The person is not happy with the last action. My answer:\n{text}\nI hope this helps.",
        "think": "<think>The person says something about the last call. Is it {a skill} or a plan issue? "
                 f"Probably the skill.</think>\n{text}",
        "python": repr(dict(answer)),
    }[style]


DEPENDENCE_STYLES = {"bare": "{letter}", "fenced": "({letter})", "prose": "The correction depends on ({letter}).",
                     "think": "<think>Is it (a), (b) or (c)? It depends on...</think>\n({letter})", "python": "({letter}) {name}."}
LETTERS = {"last": ("a", "Last interaction"), "initial": ("b", "Initial interaction"), "none": ("c", "No dependence")}


def reader(rules: Mapping[str, Mapping[str, Any]], style: str = "bare") -> Callable[[str], str]:
    """A model's ``respond``: the first rule whose key is in the correction the prompt shows gives the answer.
    The dependence prompt (step 1) is answered with the rule's history as a letter; the solver's prompt with the
    rule's answer, whose skill-level form names the skill and object of the prompt's current skill (or, in the
    whole-history prompt, its last action) unless the rule says."""

    def respond(prompt: str) -> str:
        asked = re.search(r'^Correction: "(.*)"$', prompt, re.M)
        if asked:  # step 1: from the correction alone
            history = next((fields.get("history", "last") for key, fields in rules.items() if key in asked.group(1)), "none")
            letter, name = LETTERS[history]
            return DEPENDENCE_STYLES[style].format(letter=letter, name=name)
        said = re.search(r"^The person now says: (.*)$", prompt, re.M)
        assert said, "the prompt must show the utterance"
        last = re.search(r"^\d+\. (\w+)\((['\"])(.*?)\2.*<- the last action$", prompt, re.M) or \
            re.search(r"^The skill the robot is doing now [^:]*: (\w+)\((['\"])(.*?)\2", prompt, re.M)
        for key, fields in rules.items():
            if key in said.group(1):
                answer = {"correction": True, "history": "last", "amount": "small", "value": None, "constraint": "", **fields}
                if answer.get("level") == "skill" and last:
                    answer = {"skill": last.group(1), "object": last.group(3), **answer}
                return styled(answer, style)
        return styled(NOT_A_CORRECTION, style)

    return respond


SKILL_RULES: dict[str, dict[str, Any]] = {  # the first key in the utterance wins
    "to the left": {"level": "skill", "parameter": "", "direction": "left"},
    "a bit more": {"level": "skill", "parameter": "grasp_height_offset", "direction": "+"},
    "than the first time": {"level": "skill", "history": "initial", "parameter": "grasp_height_offset", "direction": "+"},
    "than you normally do": {"level": "skill", "history": "none", "parameter": "grasp_height_offset", "direction": "+"},
    "much higher": {"level": "skill", "parameter": "grasp_height_offset", "direction": "+", "amount": "large"},
    "a bit higher": {"level": "skill", "parameter": "grasp_height_offset", "direction": "up"},
    "lower": {"level": "skill", "parameter": "grasp_height_offset", "direction": "-"},
    "2 cm higher": {"level": "skill", "parameter": "grasp_height_offset", "direction": "+", "value": 0.02},
    "much further away": {"level": "skill", "parameter": "place_offset", "direction": "away", "amount": "large"},
    "one more pass": {"level": "skill", "parameter": "wipe_passes", "direction": "+", "value": 1},
    "many more passes": {"level": "skill", "parameter": "wipe_passes", "direction": "+", "amount": "a lot"},
    "much faster": {"level": "skill", "parameter": "speed_factor", "direction": "faster", "amount": "much"},
    "5 cm less": {"level": "skill", "parameter": "pull_distance", "direction": "-", "value": "5 cm"},
    "out 20 cm": {"level": "skill", "parameter": "pull_distance", "value": 0.2, "absolute": True},
    "blue cup instead": {"level": "plan", "history": "initial", "constraint": "Bring the blue cup,\n not the red cup."},
}


@pytest.fixture(scope="module")
def household() -> tuple[RobotApi, SkillParameters]:
    return RobotApi.load("household"), SkillParameters.load("household", profile=RobotProfile.load("household_sim"))


@pytest.fixture(scope="module")
def tabletop() -> tuple[RobotApi, SkillParameters]:
    return RobotApi.load("tabletop"), SkillParameters.load("tabletop", profile=RobotProfile.load("panda_sim"))


def handler(world: tuple[RobotApi, SkillParameters], respond: Callable[[str], str] | None = None, style: str = "bare",
            **kwargs: Any) -> tuple[CorrectionHandler, ScriptedModel]:
    model = ScriptedModel(respond=respond or reader(SKILL_RULES, style))
    return CorrectionHandler(model, world[0], world[1], object_size=lambda name: SIZES.get(name), **kwargs), model


def console(*lines: str) -> str:
    """A household transcript: the person asks for the red cup, then ``lines``."""
    head = [">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'bring me the red cup'}", ">>> list_objects()",
            "['red cup', 'blue cup', 'apple', 'milk', 'sponge']"]
    return "\n".join(head + [textwrap.dedent(line).strip("\n") for line in lines])


def said(text: str) -> str:
    return f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': {text!r}}}"


# ---------------------------------------------------------------------------------------------- skill level
@pytest.mark.parametrize("style", STYLES)
def test_a_skill_level_correction_is_grounded_in_every_answer_style(household, style: str) -> None:
    correct, model = handler(household, style=style)
    result = correct.handle("grasp it a bit higher", console(">>> grasp('red cup')\n'success'", said("grasp it a bit higher")))
    assert (result.is_correction, result.level, result.history) == (True, "skill", "last")
    assert result.call == SkillCall("grasp", ("red cup",), {}, "grasp('red cup')", "red cup")
    assert dict(result.parameters) == {"grasp_height_offset": 0.02}  # a quarter of the cup's 8 cm height
    assert result.changes == ("grasp_height_offset 0 -> 0.02 m",)
    assert result.statement == "grasp('red cup', grasp_height_offset=0.02)"
    assert result.note == result.note_line() == \
        "# correction: skill-level, about the last action: grasp('red cup') again with grasp_height_offset=0.02 (was 0)"
    assert "grasp_height_offset" in result.raw  # the model's answer, as it came
    assert result.dependence_raw == DEPENDENCE_STYLES[style].format(letter="a", name="Last interaction")
    dependence, prompt = model.prompts  # two calls: what it depends on, then the solution
    assert 'Correction: "grasp it a bit higher"' in dependence and "grasp('" not in dependence and "bring me" not in dependence
    assert "grasp_height_offset: default 0 m, range [-0.03, 0.05] m; moves the grasp point up" in prompt
    assert "the last interaction, from the person's previous words on" in prompt
    assert "{'type': 'dialog', 'text': 'bring me the red cup'}" in prompt and ">>> grasp('red cup')" in prompt
    assert "The skill the robot is doing now (its latest call, without its parameter values): grasp('red cup')" in prompt
    assert "def close(" not in prompt and "def wipe(" in prompt  # only the skills that take parameters


def test_a_learned_value_the_console_applied_is_the_base_of_the_change(household) -> None:
    correct, _ = handler(household)
    correct.learned = lambda skill, thing: {"grasp_height_offset": 0.01} if (skill, thing) == ("grasp", "red cup") else {}
    result = correct.handle("grasp it a bit higher", console(">>> grasp('red cup')\n'success'", said("grasp it a bit higher")))
    assert dict(result.parameters) == {"grasp_height_offset": 0.03} and result.note.endswith("(was 0.01)")
    written = correct.handle("grasp it a bit higher", console(">>> grasp('red cup', grasp_height_offset=0.0)\n'success'",
                                                              said("grasp it a bit higher")))
    assert dict(written.parameters) == {"grasp_height_offset": 0.02}  # a keyword the LLM wrote wins over the learned one


def test_plan_level_and_not_a_correction(household) -> None:
    correct, model = handler(household)
    history = console(">>> grasp('red cup')\n'success'")
    plan = correct.handle("no, bring the blue cup instead", history)
    assert (plan.is_correction, plan.level, plan.history) == (True, "plan", "initial")
    assert plan.constraint == "Bring the blue cup, not the red cup."  # one line
    assert plan.call is None and not plan.statement and not plan.parameters
    assert plan.note_line() == "# correction: plan-level, about the initial request: Bring the blue cup, not the red cup."
    thanks = correct.handle("thanks, that's all", history)
    assert (thanks.is_correction, thanks.level, thanks.history, thanks.note_line()) == (False, "none", "none", "")
    assert len(model.prompts) == 4 and "The person now says: thanks, that's all" in model.prompts[3]
    assert correct.handle("   ", history).level == "none" and len(model.prompts) == 4  # nothing said: no model call


def test_the_solver_sees_only_the_history_the_correction_depends_on(household) -> None:
    correct, model = handler(household)
    corrected = console(">>> grasp('red cup', speed_factor=0.4)", "'success'", said("grasp it a bit higher"),
                        "# correction: skill-level, about the last action: grasp('red cup') again with grasp_height_offset=0.02 (was 0)",
                        ">>> grasp('red cup', speed_factor=0.4, grasp_height_offset=0.02)", "'success'")
    more = correct.handle("a bit more", corrected + "\n" + said("a bit more"))
    assert dict(more.parameters) == {"speed_factor": 0.4, "grasp_height_offset": 0.04}  # compounds on the correction
    assert more.changes == ("grasp_height_offset 0.02 -> 0.04 m",)
    assert more.statement == "grasp('red cup', speed_factor=0.4, grasp_height_offset=0.04)"
    assert more.call is not None and more.call.kwargs["grasp_height_offset"] == 0.02
    last = model.prompts[-1]  # the last interaction: the previous words, the note and the re-run, not the request
    assert "'grasp it a bit higher'" in last and "grasp_height_offset=0.02)" in last and "bring me the red cup" not in last
    assert "'a bit more'" not in last.split("The person now says:")[0]  # the current words are not history

    initial = correct.handle("higher than the first time", corrected)
    assert initial.history == "initial" and initial.call is not None and initial.call.source == "grasp('red cup', speed_factor=0.4)"
    assert initial.changes == ("grasp_height_offset 0 -> 0.02 m",)
    assert initial.note.endswith("about the initial request: grasp('red cup') again with grasp_height_offset=0.02 (was 0)")
    first = model.prompts[-1]  # the original request and the first attempt, not what came after
    assert "the initial interaction" in first and "'bring me the red cup'" in first and ">>> grasp('red cup', speed_factor=0.4)" in first
    assert "'grasp it a bit higher'" not in first and "grasp_height_offset=0.02)" not in first

    fresh = correct.handle("grasp higher than you normally do", corrected)
    assert fresh.history == "none" and "regardless of the history" in fresh.note
    assert fresh.statement == "grasp('red cup', speed_factor=0.4, grasp_height_offset=0.04)"  # from where the robot is now
    alone = model.prompts[-1]  # no history at all: the skill being done, without its values
    assert "depends on: nothing; no earlier interaction is shown" in alone and ">>>" not in alone and "red cup'}" not in alone
    assert "doing now (its latest call, without its parameter values): grasp('red cup')" in alone
    assert "speed_factor=0.4" not in alone


def test_whole_history_in_one_call_is_ours_e(household) -> None:
    """history_selection false (Ours-E): one call whose prompt shows the whole history; the answer says the dependence."""
    correct, model = handler(household, config=CorrectionConfig(history_selection=False))
    corrected = console(">>> grasp('red cup', speed_factor=0.4)", "'success'", said("grasp it a bit higher"),
                        ">>> grasp('red cup', speed_factor=0.4, grasp_height_offset=0.02)", "'success'")
    initial = correct.handle("higher than the first time", corrected)
    assert len(model.prompts) == 1 and initial.dependence_raw == ""
    assert initial.history == "initial" and initial.changes == ("grasp_height_offset 0 -> 0.02 m",)
    prompt = model.prompts[0]
    assert "The person's original request: bring me the red cup" in prompt and "grasp it a bit higher" in prompt
    assert "<- the last action" in prompt and '"history" says what the correction depends on' in prompt
    more = correct.handle("a bit more", corrected)
    assert more.history == "last" and more.parameters["grasp_height_offset"] == 0.04


@pytest.mark.parametrize(("answer", "expected"), [
    ("(a)", "last"), ("b", "initial"), ("(c) No dependence.", "none"), ("<think>(a) or (b)?</think>\n(b)", "initial"),
    ("It depends on the initial interaction.", "initial"), ("No dependence", "none"), ("Answer: (C)", "none"),
    ("I am not sure.", None), ("", None),
])
def test_the_dependence_answer_is_read_in_the_styles_models_use(answer: str, expected: str | None) -> None:
    assert read_dependence(answer) == expected


def test_an_unreadable_or_failing_dependence_step_takes_the_last_interaction(household) -> None:
    def respond(prompt: str) -> str:
        if prompt.startswith("A human is issuing corrections"):
            raise LLMError("timeout")
        return reader(SKILL_RULES)(prompt)

    correct, _ = handler(household, respond=respond)
    result = correct.handle("higher than the first time", console(">>> grasp('red cup')", "'success'"))
    assert result.history == "last" and result.dependence_raw == "" and result.level == "skill"
    mumbling, _ = handler(household, respond=lambda p: "hmm" if p.startswith("A human") else reader(SKILL_RULES)(p))
    assert mumbling.handle("grasp it lower", console(">>> grasp('red cup')")).dependence_raw == "hmm"


def test_a_step_is_a_share_of_the_objects_size_along_the_parameters_axis(household, tabletop) -> None:
    correct, _ = handler(household)
    small = correct.handle("grasp it a bit higher", console(">>> grasp('apple')", "'success'"))
    tall = correct.handle("grasp it a bit higher", console(">>> grasp('milk')", "'success'"))
    unknown = correct.handle("grasp it a bit higher", console(">>> grasp('banana')", "'success'"))
    assert small.parameters["grasp_height_offset"] == 0.02 and tall.parameters["grasp_height_offset"] == 0.045
    assert unknown.parameters["grasp_height_offset"] == 0.25 * CorrectionConfig().default_size
    # place offsets: the held object's footprint, in the robot's frame at the place (+across = its left)
    placed = console(">>> grasp('milk')", "'success'", ">>> move_to('counter')", "'success'", ">>> place_object('counter')", "'success'")
    left = correct.handle("a bit more to the left", placed)
    assert left.statement == "place_object('counter', place_offset_across=0.0175)"  # 0.25 * 7 cm
    away = correct.handle("much further away please", placed)
    assert away.parameters == {"place_offset_along": 0.035} and away.changes == ("place_offset_along 0 -> 0.035 m",)
    # tabletop: x is the table's right, y its top side, the side nearest the robot
    correct, _ = handler(tabletop)
    table = ">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'put the red block in the blue bowl'}\n" \
            ">>> put_first_on_second('red block', 'blue bowl')\n'success'"
    assert correct.handle("a bit to the left", table).statement == "put_first_on_second('red block', 'blue bowl', place_offset_x=-0.01)"
    assert dict(correct.handle("much further away", table).parameters) == {"place_offset_y": -0.02}


def test_clamping_names_the_range(household) -> None:
    correct, _ = handler(household)
    result = correct.handle("much higher!", console(">>> grasp('milk', grasp_height_offset=0.03)", "'success'"))
    assert dict(result.parameters) == {"grasp_height_offset": 0.05}
    assert result.changes == ("grasp_height_offset 0.03 -> 0.05 m (clamped to the range [-0.03, 0.05] m)",)
    assert result.note.endswith("grasp_height_offset=0.05 (was 0.03, clamped to the range [-0.03, 0.05] m)")


def test_integer_passes_speed_factor_and_explicit_values(household) -> None:
    correct, _ = handler(household)
    wiped = console(">>> wipe('table')", "'success'")
    one = correct.handle("do one more pass", wiped)
    assert one.statement == "wipe('table', wipe_passes=4)" and one.parameters["wipe_passes"] == 4
    assert isinstance(one.parameters["wipe_passes"], int) and one.changes == ("wipe_passes 3 -> 4 passes",)
    many = correct.handle("many more passes", wiped)
    assert many.parameters == {"wipe_passes": 5} and isinstance(many.parameters["wipe_passes"], int)
    fast = correct.handle("wipe much faster", wiped)
    assert fast.parameters == {"speed_factor": 0.675}  # 0.3 * 1.5 ** 2
    opened = console(">>> open('cupboard')", "'success'")
    assert correct.handle("pull the drawer out 5 cm less", opened).statement == "open('cupboard', pull_distance=0.27)"
    assert correct.handle("pull it out 20 cm", opened).parameters == {"pull_distance": 0.2}
    explicit = correct.handle("grasp it 2 cm higher", console(">>> grasp('milk')", "'success'"))
    assert explicit.parameters == {"grasp_height_offset": 0.02}  # the person's number, not the object's step


def test_the_statement_keeps_the_calls_other_arguments(household, tabletop) -> None:
    correct, _ = handler(household)
    result = correct.handle("a bit higher", console(">>> grasp(\"red cup\", 'left', speed_factor=0.4)", "'success'"))
    assert result.statement == "grasp('red cup', 'left', speed_factor=0.4, grasp_height_offset=0.02)"
    assert result.call is not None and result.call.args == ("red cup", "left")
    correct, _ = handler(tabletop)
    table = ">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'put the block at the middle'}\n" \
            ">>> put_first_on_second('red block', [0.0, -0.5], speed_factor=0.5)\n'success'"
    assert correct.handle("grasp it lower", table).statement == \
        "put_first_on_second('red block', [0.0, -0.5], speed_factor=0.5, grasp_height_offset=-0.01)"


def test_last_calls_are_the_literal_calls_of_skills_with_parameters(household) -> None:
    correct, _ = handler(household)
    calls = correct.last_calls(console(">>> name = 'apple'", ">>> grasp(name)", "'success'", ">>> say('here'); move_to('table')",
                                       ">>> close('fridge')", ">>> for _ in range(2):\n...     wipe('table', wipe_passes=2)",
                                       ">>> place_object(location='table')"))
    assert [(c.skill, c.object, dict(c.kwargs)) for c in calls] == [
        ("move_to", "table", {}), ("wipe", "table", {"wipe_passes": 2}), ("place_object", "table", {"location": "table"})]
    assert calls[1].source == "wipe('table', wipe_passes=2)"


def test_words_can_correct_only_an_action_since_the_person_last_spoke(household) -> None:
    correct, _ = handler(household)
    assert correct.acted_since_last_words(console(">>> grasp('red cup')", "'success'", said("a bit higher")))
    assert not correct.acted_since_last_words(console(">>> grasp('red cup')", "'success'", said("a bit higher"),
                                                      ">>> say('ok')", said("now go to the table")))
    assert not correct.acted_since_last_words(console(said("what else?")))  # talk only
    assert correct.acted_since_last_words(console(said("hm"), ">>> move_to('table')", "'success'", said("slower")))


# ---------------------------------------------------------------------------------------------- fallbacks
def fallback(utterance: str) -> Correction:
    return Correction(True, "plan", "last", constraint=utterance,
                      note=f"{NOTE_PREFIX}plan-level, about the last action: {utterance}")


@pytest.mark.parametrize("answer", [
    '{"correction": true, "level": "skill", "skill": "grasp", "object": "red cup", "parameter": "wrist_angle", "direction": "+"}',
    '{"correction": true, "level": "skill", "skill": "slice", "object": "red cup", "parameter": "speed_factor", "direction": "+"}',
    '{"correction": true, "level": "skill", "skill": "grasp", "object": "red cup", "parameter": "grasp_height_offset"}',
    '{"correction": true, "level": "skill", "skill": "grasp", "parameter": "grasp_height_offset", "direction": "left"}',
    '{"correction": true, "level": "skill", "skill": "open", "parameter": "pull_distance", "direction": "+"}',  # no open() yet
    '{"correction": true, "level": "skill", "skill": "grasp", "parameter": "grasp_height_offset", "value": [1, 2]}',
    "I think the person wants the cup to be grasped higher.",
    "<think>The person wants {it higher",
    "",
])
def test_an_unusable_answer_is_a_plan_level_correction(household, answer: str) -> None:
    correct, _ = handler(household, respond=lambda _prompt: answer)
    utterance = "grasp  it\na bit higher"
    result = correct.handle(utterance, console(">>> grasp('red cup')", "'success'"))
    assert result == Correction(**{**fallback("grasp it a bit higher").__dict__, "raw": answer, "dependence_raw": answer})


def test_a_failing_model_is_a_plan_level_correction(household) -> None:
    def fail(_prompt: str) -> str:
        raise LLMError("connection refused")

    correct, _ = handler(household, respond=fail)
    assert correct.handle("grasp it higher", console(">>> grasp('red cup')")) == fallback("grasp it higher")
    broken_size = CorrectionHandler(ScriptedModel(respond=reader(SKILL_RULES)), *household,
                                    object_size=lambda _n: (_ for _ in ()).throw(RuntimeError("no perception")))
    assert broken_size.handle("a bit higher", console(">>> grasp('red cup')")).parameters == {"grasp_height_offset": 0.02}


def test_switched_off_every_correction_replans_without_a_model_call(household) -> None:
    correct, model = handler(household, config=CorrectionConfig(enabled=False))
    assert correct.handle("grasp it a bit higher", console(">>> grasp('red cup')")) == fallback("grasp it a bit higher")
    assert model.prompts == []


# ---------------------------------------------------------------------------------------------- grounding and config
def test_grounding_directly(household) -> None:
    declared = household[1].declared("place_object")
    assert resolve(declared, "", "to the right") == ("place_offset_across", -1)
    assert resolve(declared, "place_offset_along", "closer") == ("place_offset_along", -1)
    assert resolve(household[1].declared("open"), "pull_distance", "further") == ("pull_distance", 1)
    assert resolve(household[1].declared("grasp"), "grasp_height_offset", "left") is None
    assert resolve(declared, "grasp_height_offset", "+") is None  # not a parameter of place_object
    spec = household[1].declared("grasp")["gripper_force"]
    config = CorrectionConfig()
    assert ground(spec, 40.0, -1, "small", None, None, config) == Grounded("gripper_force", 40.0, 28.0, False, "gripper_force 40 -> 28 N")
    assert ground(spec, 40.0, +1, "", 100.0, None, config, absolute=True).value == 70.0


def test_the_shipped_config_and_bad_values() -> None:
    assert CorrectionConfig.load() == CorrectionConfig()
    assert (ROOT / "prompts" / CorrectionConfig().prompt).is_file()
    for key, value, message in (("step_fraction", 0, r"corrections.step_fraction > 0"),
                                ("enabled", "yes", r"knowledge.corrections.enabled must be true or false"),
                                ("stepfraction", 0.3, r"unknown key knowledge.corrections.stepfraction"),
                                ("max_tokens", 1.5, r"knowledge.corrections.max_tokens must be an int"),
                                ("speed_factor_step", 1.0, r"corrections.speed_factor_step > 1")):
        raw = yaml.safe_load((ROOT / "config" / "knowledge.yaml").read_text())
        raw["knowledge"]["corrections"][key] = value
        with pytest.raises(ConfigError, match=message):
            CorrectionConfig.from_mapping(raw, "test")
    assert CorrectionConfig.from_mapping({"knowledge": {}}) == CorrectionConfig()


def test_a_long_history_keeps_the_last_interactions_newest_lines_and_the_initial_ones_first(household) -> None:
    correct, _ = handler(household, config=CorrectionConfig(history_lines=4))
    tries = [line for n in range(6) for line in (f">>> grasp('red cup', speed_factor=0.{n + 1})", "'success'")]
    long = console(*tries, said("a bit higher"), ">>> grasp('red cup', grasp_height_offset=0.02)", "'success'", ">>> say('done')")
    last = correct.selected_history(Transcript.parse(long), "a bit more", "last").splitlines()
    assert last[1:] == ["(earlier lines left out)", "{'type': 'dialog', 'text': 'a bit higher'}",
                        ">>> grasp('red cup', grasp_height_offset=0.02)", "'success'", ">>> say('done')"]
    first = correct.selected_history(Transcript.parse(long), "a bit more", "initial").splitlines()
    assert first[1:] == [">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'bring me the red cup'}", ">>> list_objects()",
                         "['red cup', 'blue cup', 'apple', 'milk', 'sponge']", "(later lines left out)"]
    assert correct.selected_history(Transcript.parse(console()), "a bit more", "none").endswith("no earlier interaction is shown.")
