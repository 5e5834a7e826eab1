"""Offline proof of the baselines' mechanics (cap, dynamic-cap, helper) against the shared sim stack, with a
stand-in program writer told the expert plan (it proves the harness, not any model): the plan as a whole
program scores s = i = 100; a program that raises ends a cap run, while helper's self-reflection recovers;
dynamic-cap stores a successful program and the next run's prompt holds it, so it succeeds at once."""

from __future__ import annotations

import pytest
from timing import pytest_timeout

from teachbot.evaluation.baselines import (
    CapPrompt,
    PlanProgramModel,
    cap_example,
    read_program,
    run_transcript,
    seed_programs,
)
from teachbot.evaluation.doubles import TeacherModel
from teachbot.evaluation.harness import METHODS, AgentModels
from teachbot.evaluation.metrics import Return, read_results, summarize
from teachbot.evaluation.person import PersonConfig
from teachbot.evaluation.sweep import SweepConfig
from teachbot.llm.base import SYSTEM_END
from teachbot.nodes.eval_sweep import run_sweep

pytestmark = pytest.mark.timeout(pytest_timeout(900))


def factory(model_class=PlanProgramModel, **options):
    """Models per method; ``make.made[name]`` is the program writer a method got (to read its prompts)."""
    made = {}

    def make(method):
        made[method.name] = model_class(**options)
        return AgentModels(made[method.name], None, TeacherModel())

    make.made = made
    return make


def current_block(prompt: str) -> str:
    """The current task of a CaP prompt (after the retrieved examples)."""
    return prompt.split(SYSTEM_END, 1)[1].strip().split("\n\n")[-1]


def examples_part(prompt: str) -> str:
    """The retrieved examples of a CaP prompt ('' when none)."""
    user = prompt.split(SYSTEM_END, 1)[1].strip()
    return user[: -len(current_block(prompt))]


def test_the_methods_are_registered_as_baselines():
    assert {m: (METHODS[m].kind, METHODS[m].k) for m in ("cap", "dynamic-cap", "helper")} == \
        {"cap": ("cap", 0), "dynamic-cap": ("dynamic-cap", 16), "helper": ("helper", 16)}


def test_replies_are_read_tolerantly_and_runs_become_examples():
    fenced = ("Sure, here it is:\n```python\n# the block first\nput_first_on_second('red block', 'blue bowl')\n\n"
              "say('done')\n```\nAnything else?")
    assert read_program(fenced) == ("put_first_on_second('red block', 'blue bowl')", "say('done')")
    rambling = ("for b in objects:\n    put_first_on_second(b, 'middle')\n\n"
                "# put the red block on the left side\nput_first_on_second('red block', 'left side')")
    assert read_program(rambling) == ("for b in objects:\n    put_first_on_second(b, 'middle')",)
    assert read_program("<think>which block?</think>say('hi')") == ("say('hi')",)
    assert read_program("I cannot do that.") == ()
    text = run_transcript(["blue bowl", "red block"], [("put the red block in the blue bowl", ("say('ok')",)),
                                                      ("no, in the bowl", ("put_first_on_second('red block', 'blue bowl')",))])
    assert cap_example(text) == ("objects = ['blue bowl', 'red block']\n# put the red block in the blue bowl\nsay('ok')\n"
                                 "# no, in the bowl\nput_first_on_second('red block', 'blue bowl')")
    seed = (">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'stack them'}\n>>> get_obj_names()\n['a block', 'b block']\n"
            ">>> blocks\n['a block', 'b block']\n>>> {b: get_obj_pos(b) for b in blocks}\n{}\n"
            ">>> put_first_on_second('a block', 'b block')\n'success'\n>>> learn_from_interaction()\n>>> wait_for_trigger()")
    assert cap_example(seed) == "objects = ['a block', 'b block']\n# stack them\nput_first_on_second('a block', 'b block')"
    unlisted = seed.replace(">>> get_obj_names()\n['a block', 'b block']\n", "")  # the objects it names, as the list
    assert cap_example(unlisted) == "objects = ['a block', 'b block']\n# stack them\nput_first_on_second('a block', 'b block')"


def test_the_cap_prompt_holds_the_api_the_examples_and_the_newest_instruction():
    from teachbot.language.registry import RobotApi

    api = RobotApi.load("tabletop")
    seeds = seed_programs()
    prompt = CapPrompt(api, seeds).build(["red block", "blue bowl"], [("put the red block in the bowl", ("say('ok')",))],
                                         "it is not in the bowl", examples=["# stack them\nput_first_on_second('a', 'b')"])
    system, user = prompt.split(SYSTEM_END)
    assert api.import_block() in system and "{api}" not in system and "{examples}" not in system
    assert all(seed in system for seed in seeds) and "# put the red block in the blue bowl" in system
    assert user == ("# stack them\nput_first_on_second('a', 'b')\n\nobjects = ['red block', 'blue bowl']\n"
                    "# put the red block in the bowl\nsay('ok')\n# it is not in the bowl\n")


def test_the_plan_as_a_whole_program_scores_full_marks(client, tmp_path):
    make = factory()
    config = SweepConfig(methods=("cap", "dynamic-cap", "helper"), splits=("SA-SI",), runs=1,
                         only=("block_on_block", "all_blocks_in_bowl"), seed=4)
    records = read_results(run_sweep(config, tmp_path, make, show_progress=False, client=client))
    assert summarize(records) == {m: {"SA-SI": {"s": 100.0, "i": 100.0, "n": 0.0, "runs": 2}} for m in config.methods}, \
        [(r.method, r.template, r.returns) for r in records]
    assert all(r.tokens > 0 and r.returns == (Return("success"),) for r in records)
    for name in config.methods:  # one whole program per run, the instruction the prompt's last line
        prompts = make.made[name].prompts
        assert [current_block(p).splitlines()[-1] for p in prompts] == [f"# {r.instruction}" for r in records if r.method == name]
    assert "for name in block_names:" in next(r for r in records if r.template == "all_blocks_in_bowl").extra["transcript"]


def test_an_exception_ends_a_cap_run_and_helper_reflects_on_it(client, tmp_path):
    make = factory(raises=True)
    config = SweepConfig(methods=("cap", "helper"), splits=("SA-SI",), runs=1, only=("block_in_bowl",), seed=5)
    records = {r.method: r for r in read_results(run_sweep(config, tmp_path, make, show_progress=False, client=client))}
    assert records["cap"].returns == (Return("error"),) and records["cap"].outcome == "error"
    assert len(make.made["cap"].prompts) == 1  # no further attempt
    assert summarize(records.values()) == {"cap": {"SA-SI": {"s": 0.0, "i": 0.0, "n": None, "runs": 1}},
                                           "helper": {"SA-SI": {"s": 100.0, "i": 100.0, "n": 0.0, "runs": 1}}}
    program, reflection = make.made["helper"].prompts
    assert "raised an error" in reflection and "ValueError: unknown object 'the moon'" in reflection
    assert f"# {records['helper'].instruction}" in reflection and "ValueError" in records["helper"].extra["transcript"]


class _NoFix(PlanProgramModel):
    """Never mends a program by reflection; follows the plan once the person has said something new."""

    def answer(self, prompt: str) -> str:
        if "raised an error when it ran" in prompt:
            return self.fenced([self.FAIL])
        corrected = sum(line.startswith("# ") for line in current_block(prompt).splitlines()) > 1
        return self.fenced(self.plan if corrected else [self.FAIL])


def test_helper_reflects_twice_then_takes_the_feedback_as_a_new_command(client, tmp_path):
    make = factory(_NoFix)
    config = SweepConfig(methods=("helper",), splits=("SA-SI",), runs=1, only=("block_in_bowl",), seed=6,
                         person=PersonConfig(remember_share=0.0))
    (record,) = read_results(run_sweep(config, tmp_path, make, show_progress=False, client=client))
    assert [r.state for r in record.returns] == ["error", "success"] and record.returns[0].utterance
    assert summarize([record])["helper"]["SA-SI"] == {"s": 100.0, "i": 0.0, "n": 1.0, "runs": 1}
    prompts = make.made["helper"].prompts
    assert ["raised an error" in p for p in prompts] == [False, True, True, False]
    assert f"# {record.returns[0].utterance}" in current_block(prompts[-1])


def test_dynamic_cap_stores_a_successful_program_and_the_next_run_retrieves_it(client, tmp_path):
    """The stand-in writes the plan to a new request only when its prompt holds a like example (else it
    only talks and needs a correction): dynamic-cap succeeds at once from the second run on, cap never."""
    (tmp_path / "no_seeds" / "tabletop").mkdir(parents=True)
    make = factory(needs_example=True)
    config = SweepConfig(methods=("dynamic-cap", "cap"), splits=("UA-SI",), runs=3, only=("block_in_bowl",), seed=7,
                         person=PersonConfig(remember_share=0.0), seeds_dir=str(tmp_path / "no_seeds"))
    records = read_results(run_sweep(config, tmp_path / "sweep", make, show_progress=False, client=client))
    by_method = {m: sorted((r for r in records if r.method == m), key=lambda r: r.run) for m in config.methods}
    assert [r.initial_success for r in by_method["dynamic-cap"]] == [False, True, True], [r.returns for r in records]
    assert [r.initial_success for r in by_method["cap"]] == [False, False, False]
    assert all(r.outcome == "success" for r in records)
    assert len(list((tmp_path / "sweep" / "stores" / "dynamic-cap").glob("*.json"))) == 3
    assert not (tmp_path / "sweep" / "stores" / "cap").exists() or not list((tmp_path / "sweep" / "stores" / "cap").glob("*.json"))
    first, second = by_method["dynamic-cap"][:2]
    prompts = make.made["dynamic-cap"].prompts
    assert examples_part(prompts[0]) == ""
    run2 = next(p for p in prompts if current_block(p).splitlines()[-1] == f"# {second.instruction}")
    shown = examples_part(run2)
    assert f"# {first.instruction}" in shown and f"# {first.returns[0].utterance}" in shown
    assert "put_first_on_second(" in shown and "say('I do not know how to do that.')" in shown
    assert all(examples_part(p) == "" for p in make.made["cap"].prompts)
