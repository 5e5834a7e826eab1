"""The issue-detection benchmark end to end: scores, the report with the per-issue-type table, the
``teachbot eval raider`` command offline (precond) and against an OpenAI-compatible endpoint (the fake
server on loopback, answered by a double that decides from the tool responses it is sent)."""

from __future__ import annotations

import json
import re

import pytest
from fake_openai_server import FakeOpenAIServer

from teachbot.cli import main
from teachbot.evaluation.raider_benchmark import checker_factory, grounded_right, run_cases, score
from teachbot.evaluation.raider_cases import ISSUE_LABELS, ISSUE_TYPES, VERDICT_OF, load_cases
from teachbot.evaluation.raider_report import summarise, write_outputs
from teachbot.raider.agent import CheckResult


@pytest.fixture(scope="module")
def precond_scores():
    return run_cases(load_cases(), checker_factory("precond"))


def test_precond_scores_on_every_case_are_computed_and_reported(precond_scores, tmp_path):
    cases = load_cases()
    assert len(precond_scores) == len(cases) >= 120
    summary = write_outputs(precond_scores, tmp_path, "precond")
    o = summary["overall"]
    assert o["det"] == pytest.approx(100.0 * sum(s.det for s in precond_scores) / len(cases))
    assert o["expl"] <= o["det"]  # an explanation counts only with the right verdict
    assert o["grnd_n"] == sum(c.needs_grounding for c in cases) < len(cases)  # Grnd over the cases that need grounding
    lo, hi = o["det_ci"]
    assert lo < o["det"] < hi  # a Wilson interval over the cases
    # the paper's Precond (Table B.3's action models): no ambiguity, no reach, no sentence; its own strengths are the
    # hand and presence (the paper's row: IA 0, IU1 0, IU6 63 %)
    assert summary["issue_type"]["IA"]["det"] == 0.0 and summary["issue_type"]["IU1"]["det"] == 0.0
    assert summary["issue_type"]["IU6"]["det"] >= 40.0 and summary["issue_type"]["IU3"]["det"] >= 40.0
    natural = [s for s, c in zip(precond_scores, cases, strict=True) if c.form == "natural"]
    assert natural and all(s.verdict == "" and s.stopped == "unsupported" for s in natural)
    assert "Protocol" not in (tmp_path / "report.md").read_text()  # no protocol given: no line
    print("\n" + (tmp_path / "report.md").read_text())  # the baseline's real scores, in the test log


def test_the_reports_rows_are_the_papers_issue_types_by_the_case_definitions(precond_scores, tmp_path):
    """Each row of the report names a paper issue type in the paper's words, counts exactly the cases defined as
    that type, and sets the paper's Table 1 figure of the same type beside it; each counted case's ground truth
    is that type's by the simulated world (the same check as test_raider_cases)."""
    from test_raider_cases import check_ground_truth  # the suite's validation of a case's ground truth

    from teachbot.evaluation.raider_cases import CaseWorlds
    from teachbot.evaluation.raider_paper import PAPER_N, TABLE_1

    cases = {c.id: c for c in load_cases()}
    write_outputs(precond_scores, tmp_path, "precond")
    report = (tmp_path / "report.md").read_text()
    rows = re.findall(r"^\| (IA|IN|IU\d) ([^|]+) \| (\d+) \|.*\| ([\d.]+) \| ([\d.]+) \| (\d+) \|$", report, re.M)
    assert [r[0] for r in rows] == list(ISSUE_TYPES)
    for kind, label, n, precond_paper, raider_paper, paper_n in rows:
        assert label.strip() == ISSUE_LABELS[kind]
        counted = [s for s in precond_scores if s.issue_type == kind]
        assert int(n) == len(counted) == sum(c.issue_type == kind for c in cases.values())
        assert all(cases[s.id].issue_type == kind and cases[s.id].expected == VERDICT_OF[kind] for s in counted)
        assert float(precond_paper) == TABLE_1["Precond"][kind] and float(raider_paper) == TABLE_1["RAIDER"][kind]
        assert int(paper_n) == PAPER_N[kind]
    assert ISSUE_LABELS["IU1"].startswith("target not within reach") and ISSUE_LABELS["IU5"].startswith("common sense")
    assert ISSUE_LABELS["IU3"] == "target not present" and ISSUE_LABELS["IU6"].startswith("robot issue")
    with CaseWorlds() as worlds:
        for kind in ISSUE_TYPES:  # a sample of each row's cases, checked in the simulator
            for s in [s for s in precond_scores if s.issue_type == kind][:3]:
                check_ground_truth(cases[s.id], worlds.tools_for(cases[s.id]))


def test_scores_follow_the_case():
    case = next(c for c in load_cases() if c.issue_type == "IA")
    right = CheckResult(case.query, "ambiguity", "It could be the " + " or the ".join(alt[0] for alt in case.facts),
                        list(case.grounding))
    s = score(case, right, case.names())
    assert s.det and s.expl and s.grnd
    named = CheckResult(case.query, "ambiguity", " and ".join(alt[0] for alt in case.facts), list(case.grounding))
    assert not score(case, named, case.names()).expl  # the objects named, but no reason given
    vague = CheckResult(case.query, "ambiguity", "it is unclear", list(case.grounding))
    assert not score(case, vague, case.names()).expl  # the right verdict without the facts
    wrong = CheckResult(case.query, "none", right.explanation, list(case.grounding[:1]))
    s = score(case, wrong, case.names())
    assert not s.det and not s.expl and not s.grnd
    assert grounded_right(case, [*case.grounding, "not a thing here"], case.names())  # unknown names do not count


def test_summary_groups(precond_scores):
    summary = summarise(precond_scores)
    assert sum(r["n"] for r in summary["issue_type"].values()) == len(precond_scores)
    assert set(summary["world"]) == {"household", "tabletop"}


def test_eval_raider_precond_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "precond"
    assert main(["eval", "raider", "--method", "precond", "--world", "tabletop", "--out", str(out), "--no-progress"]) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == sum(c.world == "tabletop" for c in load_cases())
    assert json.loads((out / "summary.json").read_text())["method"] == "precond"
    assert "precond:" in capsys.readouterr().out
    assert main(["eval", "raider", "--method", "precond", "--out", str(out)]) != 0  # other settings: never mixes two runs
    assert "holds a run with other settings (it differs in world)" in capsys.readouterr().err


def test_trials_resume_and_intervals_over_trials(tmp_path, capsys):
    out = tmp_path / "trials"
    base = ["eval", "raider", "--method", "precond", "--world", "tabletop", "--limit", "6", "--out", str(out), "--no-progress"]
    assert main([*base, "--trials", "2"]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    first = [c for c in load_cases() if c.world == "tabletop"][:6]
    assert sorted((r["id"], r["trial"]) for r in rows) == sorted((c.id, t) for c in first for t in (0, 1))
    assert main([*base, "--trials", "2"]) == 0  # started again: nothing left to do, nothing added
    assert len((out / "results.jsonl").read_text().splitlines()) == 12
    with (out / "results.jsonl").open() as f:
        kept = f.read().splitlines()
    (out / "results.jsonl").write_text("\n".join(kept[:-3]) + "\n")  # an interrupted sweep: the last 3 checks lost
    assert main([*base, "--trials", "3"]) == 0  # resumes, and adds a trial
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 18 and len({(r["id"], r["trial"]) for r in rows}) == 18
    summary = json.loads((out / "summary.json").read_text())
    o = summary["overall"]
    assert o["trials"] == 3 and o["det_ci"] is not None and o["det_ci"][0] <= o["det"] <= o["det_ci"][1]
    assert json.loads((out / "raider.json").read_text())["trials"] == 3
    capsys.readouterr()


def careful_chat(body: dict) -> str:
    """The agent's turn from the chat request (the paper profile): ground from the object list of the first message,
    then ask the target's state, then judge from the tool responses in the conversation (never from the answer key)."""
    user = body["messages"][-1]["content"]
    query = re.findall(r"Action query: (.*)", user)[-1].strip()
    m = re.match(r"^\w+\(['\"]?([^'\")]*)", query)
    target = m.group(1).strip() if m else query.split()[-1]
    listing = json.loads(re.search(r"^Objects in the scene: (.*)$", user, re.M).group(1))
    responses = re.findall(r"^Tool response: Call to tool \w+ with args .*? returned (.*)$", user, re.M)
    known = listing["objects"] + listing.get("places", [])
    fits = [n for n in known if target and target in n]
    if len(fits) > 1 and target not in known:
        return json.dumps({"final_response": "ambiguity", "explanation": f"{target} could be " + " or ".join(fits),
                           "grounding": fits})
    if not fits:
        return json.dumps({"final_response": "unfeasibility", "explanation": f"There is no {target}.", "grounding": []})
    name = target if target in known else fits[0]
    if not responses:
        return f'Is it in a state to act on?\ncall_tool{{"tool": "get_obj_state", "args": ["{name}"]}}'
    return json.dumps({"final_response": "none", "explanation": f"{name}: {responses[0][:80]}", "grounding": [name]})


def test_eval_raider_against_an_endpoint(tmp_path, capsys):
    with FakeOpenAIServer() as server:
        server.respond = careful_chat
        out = tmp_path / "raider"
        code = main(["eval", "raider", "--method", "raider", "--world", "household", "--limit", "6", "--out", str(out),
                     "--llm-base-url", server.base_url, "--llm-model", "fake-model", "--no-progress"])
        assert code == 0
        requests = [r for r in server.requests if "messages" in r]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["verdict"] in ("ambiguity", "unfeasibility", "none") for r in rows)
    assert all(r["warnings"] == 0 for r in rows) and all(r["tool_calls"] >= 1 for r in rows if r["verdict"] == "none")
    assert len(requests) == sum(r["turns"] for r in rows) >= 6 + sum(r["verdict"] == "none" for r in rows)  # over HTTP
    assert "\nObjects in the scene: {\"objects\"" in requests[0]["messages"][-1]["content"]  # the first message
    assert "Tool response: Call to tool get_obj_state with args [" in requests[1]["messages"][-1]["content"]
    assert "raider:" in capsys.readouterr().out


def test_visual_obs_reads_the_whole_scene_description():
    from teachbot.evaluation.raider_benchmark import VisualObsChecker
    from teachbot.evaluation.raider_cases import CaseWorlds
    from teachbot.llm.scripted import ScriptedModel

    case = next(c for c in load_cases() if c.issue_type == "IU2" and c.world == "tabletop")

    def judge(prompt: str) -> str:  # decides from the description it is given, like a model reading the scene
        blocked = re.findall(r"^  (.+) is on top of (.+)\.$", prompt, re.M)
        if blocked:
            top, bottom = blocked[0]
            return "```json\n" + json.dumps({"final_response": "unfeasibility", "explanation": f"{top} is on top of {bottom}",
                                             "grounding": [bottom]}) + "\n```"
        return '{"final_response": "none", "explanation": "free", "grounding": []}'

    model = ScriptedModel(respond=judge, stop=())
    with CaseWorlds() as worlds:
        checker = checker_factory("visual-obs", model)(worlds.tools_for(case), case.world)
        assert isinstance(checker, VisualObsChecker)
        result = checker.check(case.query)
    prompt = model.prompts[0]  # the paper's Figure B.21: the agent's prompt, the tools replaced by the observation
    assert "Task Objective" in prompt and "Visual Observation" in prompt and " m reach" in prompt
    assert "Tool Description" not in prompt and "cannot be picked up" not in prompt
    assert result.final_response == "unfeasibility" and " is on top of " in result.explanation and result.turns == 1
    assert not result.tool_calls  # no tools: the description is all it has


def test_the_llm_judge_grades_explanations():
    from teachbot.evaluation.raider_judge import ExplanationJudge
    from teachbot.llm.scripted import ScriptedModel

    def grader(prompt: str) -> str:  # decides from the truth and the explanation in the prompt
        facts = re.search(r"the facts that\ndecide it: (.*)\.\n", prompt).group(1)
        explanation = re.search(r"The robot's explanation: (.*)", prompt).group(1)
        first = re.findall(r"'([^']*)'", facts.split(";")[0])
        return json.dumps({"correct": any(f.lower() in explanation.lower() for f in first), "reason": "compared"})

    judge = ExplanationJudge(ScriptedModel(respond=grader, stop=()))
    case = next(c for c in load_cases() if c.issue_type == "IU2")
    good = CheckResult(case.query, case.expected, " and ".join(f[0] for f in case.facts), list(case.grounding))
    assert judge.grade(case, good) is True
    assert judge.grade(case, CheckResult(case.query, case.expected, "something else entirely")) is False
    assert judge.grade(case, CheckResult(case.query, "none", good.explanation)) is False  # wrong verdict: no call
    assert ExplanationJudge(ScriptedModel(["I think so."], stop=())).grade(case, good) is None  # unreadable: no grade
    scores = run_cases([case], checker_factory("precond"), judge=judge)
    summary = summarise(scores)
    assert summary["overall"]["judged_n"] == 1 and summary["overall"]["expl_judge"] in (0.0, 100.0)


def test_the_judge_is_its_own_model_and_recorded(tmp_path, capsys):
    """With --judge-model the judge's prompts go to that model, the agent's to the model under test; without it
    the judge is the model under test and summary.json says so."""
    def respond(body: dict) -> str:
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        if "You grade the explanation" in text:
            return json.dumps({"correct": body["model"] == "judge-model", "reason": "read the truth and the explanation"})
        return careful_chat(body)

    with FakeOpenAIServer() as server:
        server.respond = respond
        base = ["eval", "raider", "--method", "raider", "--world", "household", "--limit", "3", "--judge", "--no-progress",
                "--llm-base-url", server.base_url, "--llm-model", "fake-model"]
        assert main([*base, "--judge-model", "judge-model", "--out", str(tmp_path / "judged")]) == 0
        by_model = {}
        for r in server.requests:
            if "messages" in r:
                text = "\n".join(str(m.get("content") or "") for m in r["messages"])
                by_model.setdefault(r["model"], []).append("You grade the explanation" in text)
        assert main([*base, "--out", str(tmp_path / "self")]) == 0
    assert set(by_model) == {"fake-model", "judge-model"}
    assert all(by_model["judge-model"]) and not any(by_model["fake-model"])
    judged = json.loads((tmp_path / "judged" / "summary.json").read_text())
    assert judged["models"] == {"under_test": "fake-model", "judge": "judge-model", "planner": "judge-model",
                                "judge_is_model_under_test": False}
    rows = [json.loads(line) for line in (tmp_path / "judged" / "results.jsonl").read_text().splitlines()]
    assert all(r["expl_judge"] == r["det"] for r in rows)  # the judge model answered (a wrong verdict is never judged right)
    alone = json.loads((tmp_path / "self" / "summary.json").read_text())
    assert alone["models"]["judge_is_model_under_test"] is True and alone["models"]["judge"] == "fake-model"
    assert "not independent" in (tmp_path / "self" / "report.md").read_text()
    capsys.readouterr()
