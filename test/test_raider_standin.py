"""The stand-in of ``teachbot eval raider --stand-in``: it decides from the text it is sent (the same query gives
another verdict when the tools answer otherwise), follows the procedure its prompt has (the ablation flags reach it),
slips in the ways the paper's four warnings catch (the warnings are counted, and how often it corrected itself), and
the command reports the protocol and every deviation that was on."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from teachbot.cli import main
from teachbot.evaluation.raider_benchmark import checker_factory, run_cases
from teachbot.evaluation.raider_cases import CaseWorlds, load_cases
from teachbot.evaluation.raider_report import summarise, write_outputs
from teachbot.evaluation.raider_standin import RaiderStandIn, read_prompt
from teachbot.llm.base import SYSTEM_END
from teachbot.raider.agent import RaiderAgent
from teachbot.raider.config import RaiderConfig


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in load_cases()}


def check(case, config=None, slip=0.0, style="facts"):
    with CaseWorlds() as worlds:
        tools = worlds.tools_for(case, style)
        agent = RaiderAgent(RaiderStandIn(slip).model(), tools, case.world, config or RaiderConfig(), reach=tools.reach)
        return agent.check(case.query), agent


def test_the_same_query_gets_the_verdict_the_tool_responses_give(cases):
    closed, opened = cases["hh-iu2-01"], cases["hh-in-10"]  # grasp(milk): the fridge closed, then open
    assert closed.query == opened.query == "grasp(milk)"
    shut, agent = check(closed)
    assert shut.final_response == "unfeasibility" and "fridge" in shut.explanation and "closed" in shut.explanation
    free, _ = check(opened)
    assert free.final_response == "none", free.transcript
    model = agent.model
    assert all(isinstance(p, str) for p in model.prompts)  # all it ever got: the text of its prompts
    assert not any(closed.id in p or "expected" in p or "issue_type" in p for p in model.prompts)


def test_reading_a_prompt():
    system = ("Task Objective\n...\n1. GROUND - Instance Grounding:\n2. ASK - Question Generation:\n"
              "1. The robot has a single arm with a 0.85 m reach (from the arm's base).\nrobot in a kitchen\n"
              'call_tool{"tool": ...}\n')
    convo = ('Action query: grasp(apple)\nObjects in the scene: {"objects": ["apple"], "places": ["table"]}\n'
             'Thought: x\ncall_tool{"tool": "robot_holding", "args": []}\n'
             "Tool response: Call to tool robot_holding with args [] returned The robot is holding knife.\n")
    r = read_prompt(system + SYSTEM_END + convo)
    assert r.paper and r.ground and r.ask and r.world == "household" and r.reach == 0.85
    assert r.objects == ["apple"] and r.places == ["table"] and r.query == "grasp(apple)"
    assert r.answers == {("robot_holding", ()): "The robot is holding knife."}
    answer = json.loads(RaiderStandIn()(system + SYSTEM_END + convo).split("\n", 1)[1])
    assert answer["final_response"] == "unfeasibility" and "knife" in answer["explanation"]


def test_the_ablation_flags_reach_the_stand_in(cases):
    abstract = [c for c in cases.values() if c.abstraction in ("AN", "AR") and c.issue_type != "IA"][:12]
    preconditions = [c for c in cases.values() if c.issue_type in ("IU1", "IU2", "IU5") and c.abstraction == "AS"][:12]

    def figures(ablation, group):
        model = RaiderStandIn().model()
        return summarise(run_cases(group, checker_factory("raider", model, RaiderConfig(prompt=ablation))))["overall"]

    full_a, basic_a = figures("QGEN_GRND", abstract), figures("BASIC", abstract)
    assert full_a["grnd"] > basic_a["grnd"]  # no GROUND step: a category or relation taken literally
    full_p, grnd_p = figures("QGEN_GRND", preconditions), figures("GRND", preconditions)
    assert full_p["det"] > grnd_p["det"]  # no ASK step: reach, blockage and kind never asked


def test_the_warnings_are_exercised_counted_and_reported(cases, tmp_path):
    group = [c for c in cases.values() if c.world == "tabletop"][:40]
    scores = run_cases(group, checker_factory("raider", RaiderStandIn(slip=0.35, seed=3).model(), RaiderConfig()))
    summary = write_outputs(scores, tmp_path, "raider", protocol={"profile": "paper", "deviations": []})
    o = summary["overall"]
    assert all(k > 0 for k in o["warning_kinds"]), o["warning_kinds"]  # each of the paper's four warnings
    assert 0 < o["corrected"] < o["warned_turns"] and o["warned_checks"] <= len(group)
    assert sum(s.warning_kinds[0] for s in scores) == o["warning_kinds"][0]
    report = (tmp_path / "report.md").read_text()
    assert "the model corrected itself after" in report and "Deviations from the paper's protocol: none." in report
    calm = summarise(run_cases(group[:10], checker_factory("raider", RaiderStandIn().model(), RaiderConfig())))["overall"]
    assert calm["warned_turns"] == 0  # no slip, no warning


def test_the_guided_profile_is_a_labelled_deviation(cases):
    case = cases["hh-iu1-01"]  # out of reach even from the table
    paper, agent = check(case)
    assert paper.final_response == "unfeasibility" and "m from the arm's base" in paper.tool_calls[-1].answer
    assert "0.85 m reach" in agent.system
    guided, agent = check(case, replace(RaiderConfig(), profile="guided"), style="judged")
    assert guided.final_response == "unfeasibility" and "out of reach" in guided.explanation
    assert "Tool call:" in agent.model.prompts[-1] and "call_tool{" not in agent.system


def test_eval_raider_stand_in_from_the_command_line(tmp_path, capsys):
    base = ["eval", "raider", "--world", "tabletop", "--limit", "8", "--no-progress"]
    assert main([*base, "--stand-in", "--ablation", "BASIC", "--stand-in-slip", "0.3", "--out", str(tmp_path / "b")]) == 0
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["protocol"]["ablation"] == "BASIC" and summary["protocol"]["deviations"] == []
    assert summary["models"]["under_test"].startswith("stand-in") and "warnings in" in capsys.readouterr().out
    assert main([*base, "--stand-in", "--profile", "guided", "--out", str(tmp_path / "g")]) == 0
    assert "Deviations from the paper's protocol (named options, on in this run): profile guided" in \
        (tmp_path / "g" / "report.md").read_text()
    assert main([*base, "--method", "precond", "--precond-checks", "broad", "--out", str(tmp_path / "p")]) == 0
    assert "precond checks broad" in (tmp_path / "p" / "report.md").read_text()
    assert main([*base, "--method", "precond", "--out", str(tmp_path / "q")]) == 0
    assert "Deviations from the paper's protocol: none." in (tmp_path / "q" / "report.md").read_text()
    assert main([*base, "--method", "precond", "--stand-in", "--out", str(tmp_path / "x")]) != 0  # raider only
    capsys.readouterr()


def test_native_tool_calling_with_the_stand_in(cases):
    group = [c for c in cases.values() if c.world == "tabletop"][:40]
    native = replace(RaiderConfig(), tool_calling="native")
    calm = run_cases(group[:12], checker_factory("raider", RaiderStandIn().native_model(), native))
    text = run_cases(group[:12], checker_factory("raider", RaiderStandIn().model(), RaiderConfig()))
    assert [s.verdict for s in calm] == [s.verdict for s in text] and not any(s.warnings for s in calm)
    slipping = summarise(run_cases(group, checker_factory("raider", RaiderStandIn(0.35, 5).native_model(), native)))["overall"]
    assert all(k > 0 for k in slipping["warning_kinds"]) and 0 < slipping["corrected"] <= slipping["warned_turns"]


def test_each_trial_slips_by_its_own_seed():
    system = "Task Objective\nrobot in a kitchen\n" + 'call_tool{"tool": ...}\n'
    prompts = [system + SYSTEM_END + f'Action query: grasp(apple{i})\nObjects in the scene: {{"objects": ["apple{i}"]}}\n'
               for i in range(40)]
    stand_in = RaiderStandIn(slip=0.5, seed=7)
    first = [stand_in(p) for p in prompts]
    assert first == [stand_in(p) for p in prompts]  # seeded: the same prompt, the same turn
    stand_in.reseed(1)
    assert first != [stand_in(p) for p in prompts]  # another trial, other slips
    stand_in.reseed(0)
    assert first == [stand_in(p) for p in prompts]
