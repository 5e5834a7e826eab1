"""DROC's knowledge extractor (teachbot.knowledge.extractor): skill-parameter entries read from the
transcript's skill-level corrections without a model, the model's entries checked (kind, object in the
scene, declared parameters in range, no repeats, at most max_entries), provenance and image embeddings,
no model call without a correction, the deadline, and every model failure leaving the rule entries.

The scripted model answers from the prompt (the corrections it lists), in the styles real models use."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from timing import timeout

from teachbot.errors import ConfigError
from teachbot.knowledge import ExtractionConfig, KnowledgeEntry, KnowledgeExtractor, KnowledgeStore
from teachbot.language.registry import RobotApi
from teachbot.llm.base import LLMError
from teachbot.llm.scripted import ScriptedModel
from teachbot.robot_profile import RobotProfile
from teachbot.skills.parameters import SkillParameters

ROOT = Path(__file__).resolve().parents[1]
PLAN_PROMPT = "Distil what the robot should remember"  # the first line of prompts/droc_extract.txt
SKILL_PROMPT = "The skill's calls after the correction"  # the calls section of prompts/droc_extract_skill.txt
SCENE = ("red cup", "blue cup", "apple", "milk", "sponge")
TRANSCRIPT = """\
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'bring me the red cup'}
>>> list_objects()
['red cup', 'blue cup', 'apple', 'milk', 'sponge']
>>> grasp('red cup')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'grasp it a bit higher'}
# correction: skill-level, about the last action: grasp('red cup') again with grasp_height_offset=0.02 (was 0)
>>> grasp('red cup', grasp_height_offset=0.02)
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'a bit more'}
# correction: skill-level, about the last action: grasp('red cup') again with grasp_height_offset=0.04 (was 0.02)
>>> grasp('red cup', grasp_height_offset=0.04, speed_factor=0.4)
'success'
>>> move_to('person')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'and only pull the cupboard drawer halfway'}
# correction: skill-level, regardless of the history: open('cupboard') again with pull_distance=0.16 (was 0.32)
>>> open('cupboard', pull_distance=0.16)
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'no, wipe the counter, not the table'}
# correction: plan-level, about the last action: Wipe the counter, not the table.
>>> wipe('counter', wipe_passes=5)
'success'
>>> grasp('red cup', grasp_height_offset=0.03)
'success'
"""
ONLY_THE_REQUEST = """\
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'bring me the red cup'}
>>> grasp('red cup', grasp_height_offset=0.02)
'success'
"""
GOOD = [
    {"kind": "preference", "text": "The person wants\ntheir drinks in the red cup.", "object": "red cup", "skill": "",
     "parameters": {}, "scope": "always"},
    {"kind": "Skill parameter", "text": "Grasp cups 3 cm higher than the default.", "object": "cup", "skill": "grasp",
     "parameters": {"grasp_height_offset": 0.03}, "scope": "task"},
    {"kind": "constraint", "text": "Wipe the counter when asked to clean up.", "object": "", "skill": "", "parameters": {},
     "scope": "task"},
]
BAD = [
    {"kind": "opinion", "text": "The person is picky.", "object": "", "scope": "always"},
    {"kind": "object_info", "text": "The green vase is fragile.", "object": "green vase", "scope": "object"},
    {"kind": "skill_parameter", "text": "Grasp the blue cup 20 cm higher.", "object": "blue cup", "skill": "grasp",
     "parameters": {"grasp_height_offset": 0.2}},
    {"kind": "skill_parameter", "text": "Turn the wrist for the blue cup.", "object": "blue cup", "skill": "grasp",
     "parameters": {"grasp_height_offset": 0.01, "wrist_angle": 1.0}},  # one good, one undeclared
    {"kind": "skill_parameter", "text": "Grasp the red cup higher.", "object": "red cup", "skill": "grasp",
     "parameters": {"grasp_height_offset": 0.03}},  # what the re-run calls already gave
    {"kind": "skill_parameter", "text": "Slice the apple slowly.", "object": "apple", "skill": "slice",
     "parameters": {"speed_factor": 0.2}},
    {"kind": "preference", "text": "The person wants their drinks in the red cup.", "object": "red cup"},  # a repeat
]


def styled(items: list[dict[str, Any]], style: str) -> str:
    text = json.dumps(items, indent=1)
    return {
        "bare": text,
        "fenced": f"Here is what the robot should remember:\n```json\n{text}\n```",
        "prose": f"Sure. {text}\nThese facts follow from the corrections.",
        "think": f"<think>The person corrected the grasp {{height}}. Let me list facts.</think>\n{text}",
    }[style]


def reader(style: str = "bare", items: list[dict[str, Any]] | None = None) -> Callable[[str], str]:
    """Answers from the corrections the prompt lists: the grasp correction gives ``items`` (GOOD and BAD
    mixed), anything else nothing."""

    def respond(prompt: str) -> str:
        listed = re.search(r"^The person's corrections:\n((?:- .*\n)+)", prompt, re.M)
        assert listed, "the prompt must list the corrections"
        if "- grasp it a bit higher" not in listed.group(1):
            return styled([], style)
        return styled(items if items is not None else [BAD[0], GOOD[0], BAD[1], BAD[2], GOOD[1], BAD[3], BAD[4], BAD[5], BAD[6], GOOD[2]],
                      style)

    return respond


@pytest.fixture(scope="module")
def household() -> tuple[RobotApi, SkillParameters]:
    return RobotApi.load("household"), SkillParameters.load("household", profile=RobotProfile.load("household_sim"))


RULES = ExtractionConfig(rule_skill_knowledge=True)  # the ablation: skill knowledge by rule, no skill prompt


def extractor(household, respond: Callable[[str], str] | None = None, config: ExtractionConfig | None = RULES,
              model: ScriptedModel | None = None) -> tuple[KnowledgeExtractor, ScriptedModel]:
    """An extractor with a scripted model; by default the rules ablation (the plan prompt only)."""
    model = model or ScriptedModel(respond=respond or reader(), name="extract-model")
    return KnowledgeExtractor(model, household[0], household[1], config), model


# ---------------------------------------------------------------------------------------------- rule entries
def test_rule_entries_come_from_the_recorded_skill_corrections(household) -> None:
    extract, model = extractor(household, model=ScriptedModel(respond=lambda _p: "[]"))
    entries = extract.extract(TRANSCRIPT, scene_objects=SCENE, episode_id="ep-7", robot_id="tiago-1")
    assert [(e.kind, e.skill, e.object, dict(e.parameters), e.scope) for e in entries] == [
        ("skill_parameter", "grasp", "red cup", {"grasp_height_offset": 0.03, "speed_factor": 0.4}, "object"),
        ("skill_parameter", "open", "cupboard", {"pull_distance": 0.16}, "object"),
    ]  # the later grasp of the red cup sets the final offset; wipe's passes came from no skill-level correction
    grasp, drawer = entries
    assert grasp.text == ("Grasp the red cup with grasp_height_offset=0.03, speed_factor=0.4 "
                          "(learned from: 'grasp it a bit higher'; 'a bit more')")
    assert drawer.text == "Open the cupboard with pull_distance=0.16 (learned from: 'and only pull the cupboard drawer halfway')"
    assert {e.task for e in entries} == {"bring me the red cup"}
    assert grasp.provenance.model == "rule" and grasp.provenance.episode_id == "ep-7" and grasp.provenance.robot_id == "tiago-1"
    assert grasp.provenance.source == ("grasp it a bit higher", "a bit more")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", grasp.created)
    assert "Grasp the red cup with grasp_height_offset=0.03" in model.prompts[0]  # the model is told what is learned
    assert len(model.prompts) == 1 and PLAN_PROMPT in model.prompts[0]  # the ablation sends no skill prompt


def test_a_rule_value_outside_its_range_is_left_out(household) -> None:
    text = TRANSCRIPT.replace("open('cupboard', pull_distance=0.16)", "open('cupboard', pull_distance=0.5)")
    extract, _ = extractor(household, respond=lambda _p: "[]")
    assert [e.skill for e in extract.extract(text)] == ["grasp"]


# ---------------------------------------------------------------------------------------------- model entries
@pytest.mark.parametrize("style", ["bare", "fenced", "prose", "think"])
def test_the_models_entries_are_checked(household, style: str) -> None:
    extract, model = extractor(household, respond=reader(style))
    entries = extract.extract(TRANSCRIPT, scene_objects=SCENE, episode_id="ep-7")
    learned = [e for e in entries if e.provenance.model == "extract-model"]
    assert [(e.kind, e.text, e.object, e.scope) for e in learned] == [
        ("preference", "The person wants their drinks in the red cup.", "red cup", "always"),
        ("skill_parameter", "Grasp cups 3 cm higher than the default.", "cup", "task"),
        ("constraint", "Wipe the counter when asked to clean up.", "", "task"),
    ]
    assert dict(learned[1].parameters) == {"grasp_height_offset": 0.03} and learned[1].skill == "grasp"
    assert learned[0].provenance.source == ("grasp it a bit higher", "a bit more", "and only pull the cupboard drawer halfway",
                                            "no, wipe the counter, not the table")
    assert {e.task for e in learned} == {"bring me the red cup"} and len(entries) == 5
    prompt = model.prompts[0]
    for part in ("bring me the red cup", "red cup, blue cup, apple, milk, sponge", "pull_distance: default 0.32 m, range [0.1, 0.32] m",
                 ">>> open('cupboard', pull_distance=0.16)", "At most 5 facts"):
        assert part in prompt


def test_at_most_max_entries_from_the_model(household) -> None:
    extract, _ = extractor(household, config=ExtractionConfig(max_entries=1, rule_skill_knowledge=True))
    entries = extract.extract(TRANSCRIPT, scene_objects=SCENE)
    assert [e.provenance.model for e in entries] == ["rule", "rule", "extract-model"] and entries[2].kind == "preference"


def test_without_scene_objects_the_objects_are_not_checked(household) -> None:
    extract, _ = extractor(household)
    objects = [e.object for e in extract.extract(TRANSCRIPT) if e.provenance.model != "rule"]
    assert "green vase" in objects


@pytest.mark.parametrize("answer", ["I could not find anything useful.", "<think>{\"kind\": \"preference\"", "{\"kind\": 3}"])
def test_an_unreadable_answer_or_a_failing_model_leaves_the_rule_entries(household, answer: str,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    extract, _ = extractor(household, respond=lambda _p: answer)
    assert [e.provenance.model for e in extract.extract(TRANSCRIPT, scene_objects=SCENE)] == ["rule", "rule"]
    read = answer == '{"kind": 3}'  # read, its item dropped as of no known kind; the others are counted, not hidden
    assert [(u["prompt"], u["raw"]) for u in extract.unread] == ([] if read else [("plan", answer)])

    def fail(_prompt: str) -> str:
        raise LLMError("the server is down")

    extract, _ = extractor(household, respond=fail)
    with caplog.at_level("WARNING"):
        assert [e.provenance.model for e in extract.extract(TRANSCRIPT)] == ["rule", "rule"]
    assert "the server is down" in caplog.text
    rules_only = KnowledgeExtractor(None, household[0])  # no model; the profile's world gives the parameters
    assert [e.skill for e in rules_only.extract(TRANSCRIPT)] == ["grasp", "open"]


def test_no_correction_no_model_call(household) -> None:
    extract, model = extractor(household)
    assert extract.extract(ONLY_THE_REQUEST, scene_objects=SCENE) == []
    assert extract.extract("") == [] and model.prompts == []
    off, model = extractor(household, config=ExtractionConfig(enabled=False))
    assert off.extract(TRANSCRIPT) == [] and model.prompts == []


def test_the_deadline(household) -> None:
    extract, model = extractor(household)
    assert extract.extract(TRANSCRIPT, deadline=time.monotonic() - 1) == [] and model.prompts == []

    def slow(prompt: str) -> str:
        time.sleep(0.3)
        return reader()(prompt)

    extract, model = extractor(household, respond=slow)
    start = time.monotonic()
    entries = extract.extract(TRANSCRIPT, scene_objects=SCENE, deadline=start + 0.1)
    assert [e.provenance.model for e in entries] == ["rule", "rule"] and len(model.prompts) == 1  # too late: rules only
    assert len(extract.extract(TRANSCRIPT, scene_objects=SCENE, deadline=time.monotonic() + timeout(30))) == 5


# ---------------------------------------------------------------------------------------------- images, storage, config
def test_the_objects_image_embedding_is_attached(household, tmp_path: Path) -> None:
    asked: list[str] = []

    def image_of(name: str) -> tuple[list[float], str] | None:
        asked.append(name)
        if name == "cupboard":
            raise RuntimeError("no camera view of the cupboard")
        return ([1.0, 0.0, 0.5], "colour-depth-v1") if name == "red cup" else None

    extract, _ = extractor(household)
    entries = extract.extract(TRANSCRIPT, scene_objects=SCENE, image_of=image_of)
    images = {e.object: (e.image_embedding, e.image_model) for e in entries}
    assert images == {"red cup": ((1.0, 0.0, 0.5), "colour-depth-v1"), "cupboard": (None, ""), "cup": (None, ""), "": (None, "")}
    assert sorted(asked) == ["cup", "cupboard", "red cup"]  # once per object
    store = KnowledgeStore(tmp_path / "kb")  # the entries are valid for the knowledge base as they are
    ids = [store.add(e) for e in entries]
    assert KnowledgeEntry.from_dict(store.get(ids[0]).to_dict()) == store.get(ids[0])


def test_the_shipped_config_and_bad_values() -> None:
    assert ExtractionConfig.load() == ExtractionConfig() and not ExtractionConfig().rule_skill_knowledge  # the ablation: off
    assert (ROOT / "prompts" / ExtractionConfig().prompt).is_file() and (ROOT / "prompts" / ExtractionConfig().skill_prompt).is_file()
    for key, value, message in (("max_entries", -1, "extraction.max_entries >= 0"),
                                ("prompt", "", "knowledge.extraction.prompt must be a non-empty string"),
                                ("max_entry", 3, "unknown key knowledge.extraction.max_entry")):
        raw = yaml.safe_load((ROOT / "config" / "knowledge.yaml").read_text())
        raw["knowledge"]["extraction"][key] = value
        with pytest.raises(ConfigError, match=message):
            ExtractionConfig.from_mapping(raw, "test")


def test_a_place_correction_is_learned_for_the_object_put_down(household) -> None:
    """place_object's parameters are about the object in the hand, not the location named."""
    transcript = """\
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the red mug on the table'}
>>> grasp('red mug')
'success'
>>> place_object('table')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'a bit more to the left'}
# correction: skill-level, about the last action: place_object('table') again with place_offset_across=0.017 (was 0)
>>> place_object('table', place_offset_across=0.017)
'success'
"""
    [entry] = KnowledgeExtractor(None, household[0], household[1]).rule_entries(transcript, request="put the red mug on the table")
    assert (entry.skill, entry.object, dict(entry.parameters)) == ("place_object", "red mug", {"place_offset_across": 0.017})


# ---------------------------------------------------------------------------------------------- skill prompt (the default)
def skill_reader(answers: dict[str, str], plan: str = "Reasoning: nothing beyond the skills.\n[]") -> Callable[[str], str]:
    """Answers a skill prompt with ``answers[skill]``, the plan prompt with ``plan``."""

    def respond(prompt: str) -> str:
        if SKILL_PROMPT not in prompt:
            assert PLAN_PROMPT in prompt
            return plan
        assert PLAN_PROMPT not in prompt  # the two prompts are kept apart
        return answers[re.search(r"^The skill: (\w+)", prompt, re.M).group(1)]

    return respond


GRASP_ANSWER = ("Reasoning: the person wanted the red cup grasped higher, twice; the last grasp used 0.04 and then 0.03, "
                "but the person's 'a bit more' means the 0.04 worked.\n"
                '{"skill": "grasp", "object": "red cup", "parameters": {"grasp_height_offset": 0.04}, '
                '"object_state": "The red cup is in the gripper."}')
OPEN_ANSWER = ('Reasoning: the drawer was pulled halfway.\n```json\n{"skill": "open", "object": "cupboard", '
               '"parameters": {"pull_distance": 0.16}, "object_state": ""}\n```')


def test_skill_knowledge_comes_from_the_skill_prompt_after_each_corrected_skill(household) -> None:
    extract, model = extractor(household, respond=skill_reader({"grasp": GRASP_ANSWER, "open": OPEN_ANSWER}), config=None)
    entries = extract.extract(TRANSCRIPT, scene_objects=SCENE, episode_id="ep-7")
    assert [(e.kind, e.skill, e.object, dict(e.parameters), e.provenance.model) for e in entries] == [
        ("skill_parameter", "grasp", "red cup", {"grasp_height_offset": 0.04}, "extract-model"),  # the rules would say 0.03
        ("object_state", "", "red cup", {}, "extract-model"),
        ("skill_parameter", "open", "cupboard", {"pull_distance": 0.16}, "extract-model"),
    ]
    assert entries[1].text == "The red cup is in the gripper." and entries[0].provenance.source == ("grasp it a bit higher", "a bit more")
    grasp, drawer, plan = model.prompts
    assert SKILL_PROMPT in grasp and SKILL_PROMPT in drawer and PLAN_PROMPT in plan
    for part in ("The skill: grasp", "The object it acted on: red cup", "- grasp it a bit higher\n- a bit more",
                 ">>> grasp('red cup', grasp_height_offset=0.02)\n'success'", ">>> grasp('red cup', grasp_height_offset=0.03)",
                 "(nothing known)", "Reasoning:"):
        assert part in grasp, part
    assert ">>> open(" not in grasp and "- red cup: The red cup is in the gripper." in drawer  # the state is tracked
    assert "Grasp the red cup with grasp_height_offset=0.04" in plan and "Reasoning:" in plan  # plan level sees the skills' knowledge
    assert extract.unread == []


def test_an_unreadable_skill_answer_is_counted_and_nothing_stands_in(household, caplog: pytest.LogCaptureFixture) -> None:
    vague = "Reasoning: the person wanted it higher. I would grasp it higher."
    too_far = '{"skill": "open", "object": "cupboard", "parameters": {"pull_distance": 0.5}, "object_state": ""}'
    extract, model = extractor(household, respond=skill_reader({"grasp": vague, "open": too_far}), config=None)
    with caplog.at_level("WARNING"):
        entries = extract.extract(TRANSCRIPT, scene_objects=SCENE)
    assert entries == [] and len(model.prompts) == 3  # no rule entry in their place
    assert [(u["prompt"], u["raw"]) for u in extract.unread] == [("skill", vague), ("skill", too_far)]
    assert "out of its range" in extract.unread[1]["why"] and "cannot use the model's answer to the skill prompt" in caplog.text


def test_without_a_model_or_with_the_ablation_no_skill_prompt(household) -> None:
    ablation, model = extractor(household, respond=skill_reader({}), config=RULES)
    assert [(e.skill, e.provenance.model) for e in ablation.extract(TRANSCRIPT)] == [("grasp", "rule"), ("open", "rule")]
    assert all(SKILL_PROMPT not in p for p in model.prompts)
    off = ExtractionConfig(max_entries=0)
    extract, model = extractor(household, respond=skill_reader({"grasp": GRASP_ANSWER, "open": OPEN_ANSWER}), config=off)
    assert [e.provenance.model for e in extract.extract(TRANSCRIPT)] == ["extract-model"] * 3 and len(model.prompts) == 2


def test_a_skill_knowledge_only_the_models_answer_gives_is_stored(household) -> None:
    """The re-run call writes no keyword (the default worked): the rules have no value to store; the skill
    prompt's answer names it."""
    transcript = TRANSCRIPT.split(">>> open(")[0].split("# correction: skill-level, about the last action: grasp('red cup') again with "
                                                       "grasp_height_offset=0.04")[0]
    transcript = transcript.replace("'grasp it a bit higher'", "'just grasp it the usual way'").replace(
        ">>> grasp('red cup', grasp_height_offset=0.02)", ">>> grasp('red cup')")
    assert KnowledgeExtractor(None, household[0], household[1]).extract(transcript) == []  # the rules: nothing
    answer = ('Reasoning: the usual way is the default offset.\n{"skill": "grasp", "object": "red cup", '
              '"parameters": {"grasp_height_offset": 0.0}, "object_state": ""}')
    extract, _ = extractor(household, respond=skill_reader({"grasp": answer}), config=None)
    [entry] = extract.extract(transcript, scene_objects=SCENE)
    assert (entry.kind, entry.skill, entry.object, dict(entry.parameters)) == ("skill_parameter", "grasp", "red cup",
                                                                               {"grasp_height_offset": 0.0})
