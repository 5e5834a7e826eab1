"""The simulated person: ends a successful run, corrects a failed one from the diagnosis, gives up after N."""

from __future__ import annotations

import numpy as np
import pytest

from teachbot.errors import ConfigError
from teachbot.evaluation.person import LlmPerson, PersonConfig, Situation, TemplatePerson, load_sentences
from teachbot.llm.scripted import ScriptedModel

DIAGNOSIS = "the red block is on the table, but it should be in the blue bowl"


def failed(corrections=0):
    return Situation("put the red block in the blue bowl", False, DIAGNOSIS, corrections)


def test_a_success_ends_the_run_quietly_or_with_praise():
    quiet = TemplatePerson(PersonConfig(praise_share=0.0), np.random.default_rng(1))
    assert quiet.react(Situation("x", True, "", 0)) == quiet.react(Situation("x", True, "", 2))
    assert quiet.react(Situation("x", True, "", 0)).ends_run and quiet.react(Situation("x", True, "", 0)).utterance == ""
    praising = TemplatePerson(PersonConfig(praise_share=1.0), np.random.default_rng(1))
    reaction = praising.react(Situation("x", True, "", 0))
    assert reaction.ends_run and reaction.utterance in load_sentences()["praise"]


def test_a_failure_is_corrected_from_the_diagnosis_until_the_limit():
    person = TemplatePerson(PersonConfig(max_corrections=3, remember_share=0.0), np.random.default_rng(7))
    for corrections in range(3):
        reaction = person.react(failed(corrections))
        assert not reaction.ends_run
        assert DIAGNOSIS in reaction.utterance or DIAGNOSIS[0].upper() + DIAGNOSIS[1:] in reaction.utterance
        assert "remember" not in reaction.utterance.lower()
    assert person.react(failed(3)) == person.react(failed(4))
    assert person.react(failed(3)).ends_run


def test_the_remember_share_and_reproducibility():
    def corrections(seed, share):
        person = TemplatePerson(PersonConfig(remember_share=share), np.random.default_rng(seed))
        return [person.react(failed()).utterance for _ in range(200)]

    assert corrections(3, 0.5) == corrections(3, 0.5)  # same seed, same sentences
    remembered = sum("remember" in u.lower() or "in mind" in u.lower() for u in corrections(3, 0.3))
    assert 40 <= remembered <= 80  # about 30 % of 200
    assert all("remember" in u.lower() or "in mind" in u.lower() for u in corrections(4, 1.0))


def test_the_llm_person_sees_goal_diagnosis_words_and_world_never_code():
    model = ScriptedModel(respond=lambda prompt: ' "No, I wanted the red block in the blue bowl." ')
    person = LlmPerson(PersonConfig(kind="llm", remember_share=1.0), model, np.random.default_rng(0))
    situation = Situation("put the red block in the blue bowl", False, DIAGNOSIS, 0,
                          world="red block on the table; blue bowl empty", robot_words=("Done!",))
    reaction = person.react(situation)
    assert reaction == reaction.__class__("No, I wanted the red block in the blue bowl.", ends_run=False)
    prompt = model.prompts[0]
    assert DIAGNOSIS in prompt and "red block on the table" in prompt and "Done!" in prompt
    assert "remember" in prompt and ">>>" not in prompt and "put_first_on_second" not in prompt
    assert person.react(Situation("x", True, "", 1)).ends_run and len(model.prompts) == 1  # no praise: no call


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="template, llm"):
        PersonConfig(kind="robot")
    with pytest.raises(ConfigError, match="within 0..1"):
        PersonConfig(remember_share=1.5)
