"""The issue-detection benchmark's summary and report: rates with 95 % intervals, beside the paper's Table 1.

Per group of case scores (overall, per issue type, abstraction, world, query type): Det and Expl over all
its cases, Grnd over the cases that need grounding only (the paper's definition: an abstract query, AN, AR
or AC, or an ambiguity), each with a 95 % interval: over one trial a Wilson interval (each case a Bernoulli
draw), over several trials the mean of the per-trial rates with a Student-t interval
(teachbot.evaluation.metrics.wilson and t_interval). Also the share of issue cases whose explanation states
the case's issue type, the mean time, Recov_Plan and the LLM judge's Expl where they ran, and the program
flow manager's warnings: how many model turns drew one and how many of those the model corrected (its next
turn drew none). The report's main table has one row per paper issue type, labelled with the paper's
words, and sets Table 1's figures for the same type beside ours. Pure Python.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from teachbot.evaluation.metrics import t_interval, wilson
from teachbot.evaluation.raider_cases import ABSTRACTION_LABELS, FORM_LABELS, ISSUE_LABELS, ISSUE_TYPES
from teachbot.evaluation.raider_paper import PAPER_N, PAPER_ROW, TABLE_1


class Scored(Protocol):
    """What the summary reads of a case score (teachbot.evaluation.raider_benchmark.CaseScore)."""

    issue_type: str
    abstraction: str
    world: str
    form: str
    trial: int
    det: bool
    expl: bool
    grnd: bool | None
    stated: list[str]
    time: float
    recov_plan: bool | None
    expl_judge: bool | None
    warned_turns: int
    corrected: int
    warning_kinds: list[int]


def rate(group: Sequence[Scored], value: Callable[[Scored], bool | None]) -> dict[str, Any]:
    """Percent of the group's scores where ``value`` is true (None: not counted), with n and its 95 % interval."""
    by_trial: dict[int, list[bool]] = defaultdict(list)
    for s in group:
        v = value(s)
        if v is not None:
            by_trial[s.trial].append(bool(v))
    n = sum(len(v) for v in by_trial.values())
    if not n:
        return {"value": None, "n": 0, "ci95": None, "over": "cases"}
    if len(by_trial) == 1:
        (values,) = by_trial.values()
        ci = wilson(sum(values), len(values))
        return {"value": 100.0 * sum(values) / len(values), "n": n, "over": "cases",
                "ci95": None if ci is None else [100.0 * ci[0], 100.0 * ci[1]]}
    per_trial = [100.0 * sum(v) / len(v) for _, v in sorted(by_trial.items())]
    ci = t_interval(per_trial)
    return {"value": statistics.fmean(per_trial), "n": n, "trials": len(per_trial), "over": "trials",
            "ci95": None if ci is None else [max(0.0, ci[0]), min(100.0, ci[1])]}


def rates(group: Sequence[Scored]) -> dict[str, Any]:
    """One group's figures (percent; ``*_ci`` their 95 % intervals); {'n': 0} for none."""
    if not group:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(group), "trials": len({s.trial for s in group})}
    for key, value in (("det", lambda s: s.det), ("expl", lambda s: s.expl), ("grnd", lambda s: s.grnd),
                       ("type_stated", lambda s: s.issue_type in s.stated if s.issue_type != "IN" else None),
                       ("recov_plan", lambda s: s.recov_plan), ("expl_judge", lambda s: s.expl_judge)):
        r = rate(group, value)
        out[key], out[f"{key}_ci"] = r["value"], r["ci95"]
        out[f"{key}_n"] = r["n"]
    out["recov_n"], out["judged_n"] = out.pop("recov_plan_n"), out.pop("expl_judge_n")
    out["time"] = sum(s.time for s in group) / len(group)
    warned = sum(s.warned_turns for s in group)
    out["warned_turns"], out["corrected"] = warned, sum(s.corrected for s in group)
    out["corrected_share"] = 100.0 * out["corrected"] / warned if warned else None
    kinds = [s.warning_kinds or [0, 0, 0, 0] for s in group]
    out["warning_kinds"] = [sum(k[i] for k in kinds) for i in range(4)]  # the paper's warnings 1-4
    out["warned_checks"] = sum(1 for s in group if s.warned_turns)
    out["warned_checks_share"] = 100.0 * out["warned_checks"] / len(group)
    return out


def summarise(scores: Sequence[Scored]) -> dict[str, Any]:
    """Figures overall, per issue type, abstraction, world and query type."""
    def by(key: str) -> dict[str, dict[str, Any]]:
        values = sorted({getattr(s, key) for s in scores})
        return {v: rates([s for s in scores if getattr(s, key) == v]) for v in values}

    return {"overall": rates(scores), "issue_type": by("issue_type"), "abstraction": by("abstraction"),
            "world": by("world"), "form": by("form")}


def _pct(r: dict[str, Any], key: str, interval: bool = True) -> str:
    value = r.get(key)
    if value is None:
        return "-"
    ci = r.get(f"{key}_ci")
    return f"{value:.1f}" + (f" [{ci[0]:.0f}–{ci[1]:.0f}]" if interval and ci else "")


def report_markdown(summary: dict[str, Any], method: str) -> str:
    """The report: overall figures, the per-issue-type table beside the paper's Table 1, the other groups."""
    o = summary["overall"]
    paper = PAPER_ROW.get(method, "")
    extra = ""
    if o.get("recov_n"):
        extra += f" Recov_Plan {_pct(o, 'recov_plan')} % of {o['recov_n']} right issue verdicts."
    if o.get("judged_n"):
        extra += f" Expl by the LLM judge {_pct(o, 'expl_judge')} % of {o['judged_n']} graded."
    if o.get("warned_turns"):
        kinds = o.get("warning_kinds") or [0, 0, 0, 0]
        extra += (f" Warnings: {o['warned_turns']} model turns drew one ({o.get('warned_checks', 0)} checks, "
                  f"{o.get('warned_checks_share', 0.0):.1f} % of them; warnings 1-4 of the paper's PFM: "
                  f"{', '.join(str(k) for k in kinds)}); the model corrected itself after {o['corrected']} of them "
                  f"({o['corrected_share']:.1f} %; the paper: warnings in 5.3 % of its cases, corrected in 86.8 %).")
    elif "warned_turns" in o and method != "precond":
        extra += " Warnings: none drew one."
    models = summary.get("models") or {}
    lines = [f"# Issue detection: {method}", "",
             f"{o['n']} case checks ({o['trials']} trial{'s' if o['trials'] != 1 else ''}). Grnd {_pct(o, 'grnd')} % of "
             f"{o['grnd_n']} that need grounding, Det {_pct(o, 'det')} %, Expl {_pct(o, 'expl')} %, mean time "
             f"{o['time']:.3f} s per check.{extra}", ""]
    protocol = summary.get("protocol") or {}
    if protocol:
        lines += ["Protocol: " + "; ".join(f"{k} {v}" for k, v in protocol.items() if k != "deviations") + ".",
                  "", ("Deviations from the paper's protocol (named options, on in this run): "
                       + "; ".join(protocol["deviations"]) + ".") if protocol.get("deviations")
                  else "Deviations from the paper's protocol: none.", ""]
    if models:
        lines += ["Models: " + "; ".join(f"{role} {name}" for role, name in models.items() if role != "judge_is_model_under_test")
                  + (" (the judge and the planner are the model under test: not independent)" if models.get("judge_is_model_under_test")
                     else "") + ".", ""]
    head = "| issue type (the paper's) | n | Grnd % | Det % | Expl % [95 %] | type stated % | Expl judge % | Time s | Recov_Plan % |"
    rows = "|---|---|---|---|---|---|---|---|---|"
    if paper and paper != "RAIDER":
        head += f" paper {paper} Expl % |"
        rows += "---|"
    head += " paper RAIDER Expl % | paper n |"
    rows += "---|---|"
    lines += [head, rows]
    for kind in ISSUE_TYPES:
        r = summary["issue_type"].get(kind)
        if not r:
            continue
        grnd = f"{_pct(r, 'grnd', False)} ({r['grnd_n']})" if r.get("grnd_n") else "-"
        line = (f"| {kind} {ISSUE_LABELS[kind]} | {r['n']} | {grnd} | {_pct(r, 'det', False)} | {_pct(r, 'expl')} | "
                f"{_pct(r, 'type_stated', False)} | {_pct(r, 'expl_judge', False)} | {r['time']:.3f} | {_pct(r, 'recov_plan', False)} |")
        if paper and paper != "RAIDER":
            line += f" {TABLE_1[paper][kind]:.1f} |"
        lines.append(line + f" {TABLE_1['RAIDER'][kind]:.1f} | {PAPER_N[kind]} |")
    for key, title, labels in (("abstraction", "query abstraction", ABSTRACTION_LABELS), ("world", "world", {}),
                               ("form", "query type", FORM_LABELS)):
        lines += ["", f"| {title} | n | Grnd % | Det % | Expl % [95 %] |", "|---|---|---|---|---|"]
        for value, r in summary[key].items():
            label = f"{value} {labels[value].split(':')[0].split(' (')[0]}" if value in labels else value
            lines.append(f"| {label} | {r['n']} | {_pct(r, 'grnd', False)} | {_pct(r, 'det', False)} | {_pct(r, 'expl')} |")
    lines += ["", "Issue types and abstractions are the RAIDER paper's (its section 4.1.1), with its numbers: each row "
              "compares the same kind of issue. Grnd: over the cases that need grounding (an abstract query, AN, AR or AC, "
              "or an ambiguity; their count in brackets), the query grounded to exactly the expected objects, or for an "
              "ambiguity the ambiguity detected. Det: the verdict (ambiguity, unfeasibility, none) is right. Expl: the verdict "
              "is right, the explanation states the reason of the case's issue type (and at most one other) and names every "
              "key fact of the case (teachbot.evaluation.raider_explain); for IN it claims no issue. Type stated: of the issue "
              "cases, the explanation states the case's issue type. [95 %]: Wilson interval over the cases (one trial), or a "
              "Student-t interval over the trials' rates. Expl judge: the LLM judge finds the true reason. Recov_Plan: of the "
              "right issue verdicts, the recovery plan works in the case's world. The paper's figures are GPT-4o on its "
              "AI2-THOR dataset (Table 1, Expl %; paper n: the smallest case counts that give its percentages), for "
              "orientation: same issue types, other scenes and tools."]
    return "\n".join(lines) + "\n"


def write_outputs(scores: Sequence[Scored], out: Path, method: str, models: dict[str, Any] | None = None,
                  protocol: dict[str, Any] | None = None) -> dict[str, Any]:
    """summary.json and report.md in ``out`` (results.jsonl is written while running). ``protocol``: how the run was
    set up (profile, ablation, precond checks, stand-in) and its ``deviations`` from the paper's protocol."""
    summary = summarise(scores)
    summary["method"] = method
    if protocol:
        summary["protocol"] = protocol
    if models:
        summary["models"] = models
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(report_markdown(summary, method))
    return summary
