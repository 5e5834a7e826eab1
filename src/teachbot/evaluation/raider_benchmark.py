"""The issue-detection benchmark: run a method on the cases, score it, write the report.

Methods: ``raider`` (the agent with a model and a prompt ablation), ``precond`` (predefined precondition
checks, no model) and ``visual-obs`` (one model call with the whole scene described instead of tools).
Scores per case: Grnd (for the cases that need grounding: the grounded objects are the expected ones, or
an ambiguity detected), Det (the verdict is right), Expl (the verdict is right and the explanation gives
the case's reason and key facts: teachbot.evaluation.raider_explain), Time, and the model turns that drew
a warning and were corrected. ``--trials N`` repeats every case N times; ``results.jsonl`` gains one line
per finished check (with its trial) and a run started again with the same settings skips what is there
(``raider.json`` holds the settings). ``summary.json`` and ``report.md`` come from
teachbot.evaluation.raider_report. With a recovery planner, Recov_Plan too: for each case whose issue
verdict is right, the recovery plan runs in the case's world (teachbot.evaluation.raider_recovery).
Pure Python, no ROS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from teachbot.errors import ConfigError
from teachbot.evaluation.raider_cases import CaseWorlds, RaiderCase
from teachbot.evaluation.raider_explain import explained, reasons
from teachbot.evaluation.raider_judge import ExplanationJudge
from teachbot.evaluation.raider_recovery import evaluate_recovery
from teachbot.language.prompts import load_prompt
from teachbot.llm.base import SYSTEM_END, LLMError, Model
from teachbot.raider.agent import CheckResult, RaiderAgent
from teachbot.raider.config import RaiderConfig
from teachbot.raider.pfm import check_final, find_json, warning_kind
from teachbot.raider.precond import PrecondChecker
from teachbot.raider.recovery import RecoveryPlanner
from teachbot.raider.tools import GroundedTools, ToolError, normalise
from teachbot.tracing import evaluation_run

METHODS = ("raider", "precond", "visual-obs")
SETTINGS_FILE = "raider.json"
RESULTS = "results.jsonl"


@dataclass(frozen=True)
class CaseScore:
    """One check's outcome and scores; ``grnd`` is None for a case that needs no grounding, ``recov_plan`` where
    recovery was not evaluated. ``stated``: the issue types whose reason the explanation states."""

    id: str
    world: str
    issue_type: str
    abstraction: str
    form: str
    expected: str
    verdict: str
    explanation: str
    grounding: list[str]
    grnd: bool | None
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
    trial: int = 0
    stated: list[str] = field(default_factory=list)
    warned_turns: int = 0  # model turns that drew a warning
    corrected: int = 0  # of those, the ones whose next turn drew none
    warning_kinds: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # warnings 1-4 of the paper's PFM

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseScore:
        """A line of results.jsonl (a line from before trials is trial 0)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def grounded_right(case: RaiderCase, grounding: Iterable[str], known: Iterable[str]) -> bool:
    """The method grounded the query to exactly the expected objects (only names of the scene count)."""
    names = {normalise(n) for n in known}
    got = {normalise(g) for g in grounding} & names
    return got == {normalise(g) for g in case.grounding}


def grounding_score(case: RaiderCase, result: CheckResult, known: Iterable[str]) -> bool | None:
    """The paper's Grnd for one case: None when it needs no grounding; for an ambiguity, the ambiguity detected;
    else the query grounded to exactly the expected objects."""
    if not case.needs_grounding:
        return None
    if case.issue_type == "IA":
        return result.final_response == "ambiguity"
    return grounded_right(case, result.grounding, known)


def corrections(turn_warnings: Sequence[int]) -> tuple[int, int]:
    """(turns that drew a warning, those whose next turn drew none: the model corrected itself)."""
    warned = sum(1 for w in turn_warnings if w)
    corrected = sum(1 for w, after in zip(turn_warnings, turn_warnings[1:], strict=False) if w and not after)
    return warned, corrected


def score(case: RaiderCase, result: CheckResult, known: Iterable[str], trial: int = 0) -> CaseScore:
    """One check scored against its case."""
    det = result.final_response == case.expected
    warned, corrected = corrections(getattr(result, "turn_warnings", []))
    return CaseScore(
        case.id, case.world, case.issue_type, case.abstraction, case.form, case.expected, result.final_response,
        result.explanation, list(result.grounding), grounding_score(case, result, known), det,
        explained(case, result.final_response, result.explanation), result.elapsed, result.turns, len(result.tool_calls),
        len(result.warnings), result.stopped, trial=trial, stated=reasons(result.explanation),
        warned_turns=warned, corrected=corrected,
        warning_kinds=[sum(1 for w in result.warnings if warning_kind(w) == k) for k in (1, 2, 3, 4)],
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
    """One model call per check with the full scene description instead of tools: the paper's LLMVisualObs (its
    Appendix B.3, Figure B.21: the agent's prompt without the tool sections, the visual observation instead)."""

    def __init__(self, model: Model, tools: GroundedTools, world: str) -> None:
        self.model, self.tools, self.world = model, tools, world

    def check(self, query: str) -> CheckResult:
        started = time.monotonic()
        result = CheckResult(query, "", "")
        prompt = load_prompt("raider/visual_obs.txt").format(
            world=load_prompt(f"raider/paper_world_{self.world}.txt").strip(), scene=describe_scene(self.tools),
            limits=self.tools.reach.describe())
        try:
            completion = self.model.generate(prompt + SYSTEM_END + f"Query action: {query}\n", stop=(), max_tokens=600)
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


def checker_factory(method: str, model: Model | None = None, config: RaiderConfig | None = None,
                    precond_checks: str = "paper") -> Checker:
    """How to build ``method``'s checker for one case's tools (precond: Table B.3's checks, or the broad ones)."""
    if method == "precond":
        return lambda tools, world: PrecondChecker(tools, world, precond_checks)
    if model is None:
        raise ValueError(f"method {method!r} needs a model (--llm-base-url/--llm-model, or a stand-in)")
    if method == "raider":
        return lambda tools, world: RaiderAgent(model, tools, world, config, reach=tools.reach)
    if method == "visual-obs":
        return lambda tools, world: VisualObsChecker(model, tools, world)
    raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")


def open_output(out: Path, settings: dict[str, Any]) -> list[CaseScore]:
    """Create ``out`` for a run with ``settings``, or resume it: the scores already in its results.jsonl.

    A directory holding a run with other settings (``raider.json``; a higher ``trials`` is the same run with more
    trials), or results without settings, is refused so nothing is mixed or overwritten."""
    out.mkdir(parents=True, exist_ok=True)
    marker, results = out / SETTINGS_FILE, out / RESULTS
    if marker.exists():
        held = json.loads(marker.read_text())
        diff = sorted(k for k in set(held) | set(settings) if held.get(k) != settings.get(k))
        if diff and not (diff == ["trials"] and int(held.get("trials", 1)) < int(settings["trials"])):
            raise ConfigError(f"{out} holds a run with other settings (it differs in {', '.join(diff)}); choose another "
                              "--out, or repeat that run's settings to resume it (a higher --trials adds trials)")
    elif results.exists():
        raise ConfigError(f"{out} already holds results.jsonl without {SETTINGS_FILE}; give a new --out directory")
    marker.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    if not results.exists():
        return []
    return [CaseScore.from_json(json.loads(line)) for line in results.read_text().splitlines() if line.strip()]


def run_cases(cases: Sequence[RaiderCase], make_checker: Checker, out: Path | None = None,
              progress: Callable[[CaseScore], None] | None = None, recover: RecoveryPlanner | None = None,
              judge: ExplanationJudge | None = None, trials: int = 1, done: Sequence[CaseScore] = (),
              on_trial: Callable[[int], None] | None = None, tool_style: str = "facts") -> list[CaseScore]:
    """Check every case in its simulated world, ``trials`` times; the (case, trial) pairs in ``done`` are kept and
    skipped. With ``out``, append each new score to results.jsonl. With ``recover``, run the recovery plan of each
    case whose issue verdict is right (recovery.jsonl); with ``judge``, grade each explanation by the LLM judge too.
    ``on_trial(t)`` is called before a trial's first new check (a stand-in reseeds itself there). ``tool_style``: the
    grounded tools' (facts, the paper's; judged for the guided profile)."""
    wanted = {c.id for c in cases}
    scores = [s for s in done if s.id in wanted and s.trial < trials]
    finished = {(s.id, s.trial) for s in scores}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    with CaseWorlds() as worlds:
        for trial in range(trials):
            todo = [c for c in cases if (c.id, trial) not in finished]
            if todo and on_trial is not None:
                on_trial(trial)
            for case in todo:
                with evaluation_run("raider", task=case.id, issue=case.issue_type, world=case.world) as trace_id:
                    scores.append(_run_case(case, worlds, make_checker, out, recover, judge, trace_id, trial, tool_style))
                if out is not None:
                    with (out / RESULTS).open("a") as f:
                        f.write(json.dumps(asdict(scores[-1])) + "\n")
                if progress is not None:
                    progress(scores[-1])
    return scores


def _run_case(case: RaiderCase, worlds: CaseWorlds, make_checker: Checker, out: Path | None, recover: RecoveryPlanner | None,
              judge: ExplanationJudge | None, trace_id: str, trial: int = 0, tool_style: str = "facts") -> CaseScore:
    """One case checked (and recovered, and judged, as asked), its score with its trace id."""
    tools = worlds.tools_for(case, tool_style)
    listing = json.loads(tools.object_detection())
    known = [*listing["objects"], *listing.get("places", [])]
    try:
        result = make_checker(tools, case.world).check(case.query)
    except ToolError as exc:  # a checker that cannot even start counts as no verdict
        result = CheckResult(case.query, "", str(exc), stopped="error")
    s = score(case, result, known, trial)
    if judge is not None:
        s = replace(s, expl_judge=judge.grade(case, result))
    if recover is not None and s.det and result.issue:
        scene = describe_scene(tools) if "scene" in recover.context else ""  # the paper's Table 2 variants
        outcome = evaluate_recovery(case, result, recover, worlds, scene)
        s = replace(s, recov_plan=outcome.success)
        if out is not None:
            with (out / "recovery.jsonl").open("a") as f:
                f.write(json.dumps({**asdict(outcome), "trial": trial}) + "\n")
    return replace(s, trace_id=trace_id)
