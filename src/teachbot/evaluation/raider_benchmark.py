"""The issue-detection benchmark: run a method on the cases, score it, write the report.

Methods: ``raider`` (the agent with a model and a prompt ablation), ``precond`` (predefined precondition
checks, no model) and ``visual-obs`` (one model call with the whole scene described instead of tools).
Scores per case: Grnd (the grounded objects are the expected ones), Det (the verdict is right), Expl
(the verdict is right and the explanation mentions every key fact of the case), Time. The output
follows the evaluation harness: ``results.jsonl`` (one line per case), ``summary.json`` and
``report.md`` with a per-issue-type table like the RAIDER paper's Table 1. With a recovery planner,
Recov_Plan too: for each case whose issue verdict is right, the recovery plan runs in the case's world
and counts when it works (:mod:`teachbot.evaluation.raider_recovery`). Pure Python, no ROS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from teachbot.evaluation.raider_cases import CaseWorlds, RaiderCase, fact_score
from teachbot.evaluation.raider_judge import ExplanationJudge
from teachbot.evaluation.raider_recovery import evaluate_recovery
from teachbot.language.prompts import load_prompt
from teachbot.llm.base import SYSTEM_END, LLMError, Model
from teachbot.raider.agent import CheckResult, RaiderAgent, check_final, find_json
from teachbot.raider.config import RaiderConfig
from teachbot.raider.precond import PrecondChecker
from teachbot.raider.recovery import RecoveryPlanner
from teachbot.raider.tools import GroundedTools, ToolError, normalise
from teachbot.tracing import evaluation_run

METHODS = ("raider", "precond", "visual-obs")
ISSUE_TYPES = ("IA", "IU1", "IU2", "IU3", "IU4", "IU5", "IU6", "IN")
PAPER = {  # RAIDER (GPT-4o) explanation success per issue type, %
    "IA": 100.0, "IU1": 85.7, "IU2": 75.0, "IU3": 90.9, "IU4": 96.8, "IU5": 68.4, "IU6": 85.2, "IN": 92.3,
}


@dataclass(frozen=True)
class CaseScore:
    """One case's outcome and scores; ``recov_plan`` is None where recovery was not evaluated."""

    id: str
    world: str
    issue_type: str
    abstraction: str
    form: str
    expected: str
    verdict: str
    explanation: str
    grounding: list[str]
    grnd: bool
    det: bool
    expl: bool
    time: float
    turns: int
    tool_calls: int
    warnings: int
    stopped: str
    recov_plan: bool | None = None
    expl_judge: bool | None = None  # the LLM judge's grade of the explanation (None: not judged)
    trace_id: str = ""  # the case's trace (teachbot trace show <trace_id>)


def grounded_right(case: RaiderCase, grounding: Iterable[str], known: Iterable[str]) -> bool:
    """The method grounded the query to exactly the expected objects (only names of the scene count)."""
    names = {normalise(n) for n in known}
    got = {normalise(g) for g in grounding} & names
    return got == {normalise(g) for g in case.grounding}


def score(case: RaiderCase, result: CheckResult, known: Iterable[str]) -> CaseScore:
    det = result.final_response == case.expected
    return CaseScore(
        case.id, case.world, case.issue_type, case.abstraction, case.form, case.expected, result.final_response,
        result.explanation, list(result.grounding), grounded_right(case, result.grounding, known), det,
        det and fact_score(case, result.explanation) == 1.0, result.elapsed, result.turns, len(result.tool_calls),
        len(result.warnings), result.stopped,
    )


# ---------------------------------------------------------------------- the visual-obs baseline
def describe_scene(tools: GroundedTools) -> str:
    """The whole scene as text: every object's state and properties, what rests on and in what, the hand."""
    listing = json.loads(tools.object_detection())
    lines = [tools.robot_holding()]
    for name in listing["objects"]:
        lines.append(f"{name}: state {tools.get_obj_state(name)}; properties {tools.get_obj_properties(name)}")
        for relation in ("on top of", "inside", "blocking"):
            answer = tools.check_obj_relationship(relation, name)
            if not answer.startswith("Nothing"):
                lines.append(f"  {answer}")
    for place in listing.get("places", []):
        lines.append(f"{place} (a place): state {tools.get_obj_state(place)}")
    for name in listing["objects"]:
        lines.append(f"  {tools.dist_to_target(name)}")
    return "\n".join(lines)


class VisualObsChecker:
    """One model call per check with the full scene description instead of tools."""

    def __init__(self, model: Model, tools: GroundedTools, world: str) -> None:
        self.model, self.tools, self.world = model, tools, world

    def check(self, query: str) -> CheckResult:
        started = time.monotonic()
        result = CheckResult(query, "", "")
        prompt = load_prompt("raider/visual_obs.txt").format(
            world=load_prompt(f"raider/world_{self.world}.txt").strip(), scene=describe_scene(self.tools))
        try:
            completion = self.model.generate(prompt + SYSTEM_END + f"Action query: {query}\n", stop=(), max_tokens=600)
            result.turns = 1
            value = find_json(completion.text)
            if value is None:
                result.stopped, result.explanation = "no_verdict", "the reply held no final response"
            else:
                result.final_response, result.explanation, result.grounding = check_final(value)
        except (LLMError, ValueError) as exc:
            result.stopped, result.explanation = "no_verdict", str(exc)
        result.elapsed = time.monotonic() - started
        return result


# ---------------------------------------------------------------------- running
Checker = Callable[[GroundedTools, str], Any]  # (tools, world) -> object with check(query)


def checker_factory(method: str, model: Model | None = None, config: RaiderConfig | None = None) -> Checker:
    """How to build ``method``'s checker for one case's tools."""
    if method == "precond":
        return lambda tools, world: PrecondChecker(tools, world)
    if model is None:
        raise ValueError(f"method {method!r} needs a model (--llm-base-url/--llm-model, or a stand-in)")
    if method == "raider":
        return lambda tools, world: RaiderAgent(model, tools, world, config)
    if method == "visual-obs":
        return lambda tools, world: VisualObsChecker(model, tools, world)
    raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")


def run_cases(cases: Sequence[RaiderCase], make_checker: Checker, out: Path | None = None,
              progress: Callable[[CaseScore], None] | None = None, recover: RecoveryPlanner | None = None,
              judge: ExplanationJudge | None = None) -> list[CaseScore]:
    """Check every case in its simulated world; with ``out``, append each score to results.jsonl. With
    ``recover``, run the recovery plan of each case whose issue verdict is right (recovery.jsonl); with
    ``judge``, grade each explanation by the LLM judge too."""
    scores = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    with CaseWorlds() as worlds:
        for case in cases:
            with evaluation_run("raider", task=case.id, issue=case.issue_type, world=case.world) as trace_id:
                scores.append(_run_case(case, worlds, make_checker, out, recover, judge, trace_id))
            if out is not None:
                with (out / "results.jsonl").open("a") as f:
                    f.write(json.dumps(asdict(scores[-1])) + "\n")
            if progress is not None:
                progress(scores[-1])
    return scores


def _run_case(case: RaiderCase, worlds: CaseWorlds, make_checker: Checker, out: Path | None, recover: RecoveryPlanner | None,
              judge: ExplanationJudge | None, trace_id: str) -> CaseScore:
    """One case checked (and recovered, and judged, as asked), its score with its trace id."""
    tools = worlds.tools_for(case)
    listing = json.loads(tools.object_detection())
    known = [*listing["objects"], *listing.get("places", [])]
    try:
        result = make_checker(tools, case.world).check(case.query)
    except ToolError as exc:  # a checker that cannot even start counts as no verdict
        result = CheckResult(case.query, "", str(exc), stopped="error")
    s = score(case, result, known)
    if judge is not None:
        s = replace(s, expl_judge=judge.grade(case, result))
    if recover is not None and s.det and result.issue:
        outcome = evaluate_recovery(case, result, recover, worlds)
        s = replace(s, recov_plan=outcome.success)
        if out is not None:
            with (out / "recovery.jsonl").open("a") as f:
                f.write(json.dumps(asdict(outcome)) + "\n")
    return replace(s, trace_id=trace_id)


def summarise(scores: Sequence[CaseScore]) -> dict[str, Any]:
    """Rates (percent) overall, per issue type, per abstraction and per world; mean time; recov_plan over
    the ``recov_n`` cases whose recovery was evaluated (None when none was)."""
    def rates(group: Sequence[CaseScore]) -> dict[str, Any]:
        n = len(group)
        if not n:
            return {"n": 0}
        recovered = [s.recov_plan for s in group if s.recov_plan is not None]
        judged = [s.expl_judge for s in group if s.expl_judge is not None]
        return {"judged_n": len(judged), "expl_judge": 100.0 * sum(judged) / len(judged) if judged else None,
                "n": n, "grnd": 100.0 * sum(s.grnd for s in group) / n, "det": 100.0 * sum(s.det for s in group) / n,
                "expl": 100.0 * sum(s.expl for s in group) / n, "time": sum(s.time for s in group) / n,
                "recov_n": len(recovered), "recov_plan": 100.0 * sum(recovered) / len(recovered) if recovered else None}

    def by(key: str) -> dict[str, dict[str, Any]]:
        values = sorted({getattr(s, key) for s in scores})
        return {v: rates([s for s in scores if getattr(s, key) == v]) for v in values}

    return {"overall": rates(scores), "issue_type": by("issue_type"), "abstraction": by("abstraction"),
            "world": by("world"), "form": by("form")}


def report_markdown(summary: dict[str, Any], method: str) -> str:
    """The report: overall scores and the per-issue-type table next to the paper's figures."""
    def recov(r: dict[str, Any]) -> str:
        return "-" if r.get("recov_plan") is None else f"{r['recov_plan']:.1f}"

    o = summary["overall"]
    recovered = f" Recov_Plan {recov(o)} % of {o['recov_n']} right issue verdicts." if o.get("recov_n") else ""
    if o.get("judged_n"):
        recovered += f" Expl by the LLM judge {o['expl_judge']:.1f} % of {o['judged_n']} graded."
    lines = [f"# Issue detection: {method}", "",
             f"{o['n']} cases. Grnd {o['grnd']:.1f} %, Det {o['det']:.1f} %, Expl {o['expl']:.1f} %, "
             f"mean time {o['time']:.3f} s per check.{recovered}", "",
             "| issue type | n | Grnd % | Det % | Expl % | Expl judge % | Time s | Recov_Plan % | RAIDER paper Expl % |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind in ISSUE_TYPES:
        r = summary["issue_type"].get(kind)
        if r:
            judged = "-" if r.get("expl_judge") is None else f"{r['expl_judge']:.1f}"
            lines.append(f"| {kind} | {r['n']} | {r['grnd']:.1f} | {r['det']:.1f} | {r['expl']:.1f} | {judged} | {r['time']:.3f} | "
                         f"{recov(r)} | {PAPER[kind]:.1f} |")
    for key, title in (("abstraction", "abstraction"), ("world", "world"), ("form", "query form")):
        lines += ["", f"| {title} | n | Grnd % | Det % | Expl % |", "|---|---|---|---|---|"]
        for value, r in summary[key].items():
            lines.append(f"| {value} | {r['n']} | {r['grnd']:.1f} | {r['det']:.1f} | {r['expl']:.1f} |")
    lines += ["", "Grnd: the grounded objects are exactly the expected ones. Det: the verdict (ambiguity, unfeasibility, "
              "none) is right. Expl: the verdict is right and the explanation names every key fact of the case. "
              "Expl judge (- when not run): the verdict is right and the LLM judge finds the explanation gives the true reason. "
              "Recov_Plan (- when not run): of the right issue verdicts, the share whose recovery plan works in the case's "
              "world (the action then succeeds, or the robot rightly says it cannot). "
              "The paper's figures are GPT-4o on its AI2-THOR dataset, for orientation only."]
    return "\n".join(lines) + "\n"


def write_outputs(scores: Sequence[CaseScore], out: Path, method: str) -> dict[str, Any]:
    """summary.json and report.md in ``out`` (results.jsonl is written while running)."""
    summary = summarise(scores)
    summary["method"] = method
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(report_markdown(summary, method))
    return summary
