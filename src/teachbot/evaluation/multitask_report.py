"""The multi-task benchmark's summary and report (teachbot.evaluation.multitask): per protocol, method and
mode, and per task as the paper's Tables II-IV (success, task and environment retention for every task),
each rate with its 95 % interval; the worker's failures and fallbacks; which protocol ran."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from teachbot.evaluation.metrics import t_interval, wilson
from teachbot.evaluation.multitask import METHODS, MODES, RATES, read_results
from teachbot.evaluation.multitask_protocol import PROTOCOLS
from teachbot.evaluation.report import _cell as cell


def rate(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any] | None:
    """The mean of a 0/1 score over ``rows`` with its 95 % interval: Wilson over the rows of one trial, a
    t-interval over the per-trial means of several; None when no row has the score."""
    scored = [r for r in rows if r.get(key) is not None]
    if not scored:
        return None
    by_trial: dict[int, list[float]] = {}
    for r in scored:
        by_trial.setdefault(int(r.get("trial", 0)), []).append(float(r[key]))
    values = [v for vs in by_trial.values() for v in vs]
    if len(by_trial) == 1:
        ci = wilson(round(sum(values)), len(values))
        over = "cases"
    else:
        means = [sum(vs) / len(vs) for vs in by_trial.values()]
        ci = t_interval(means)
        ci = None if ci is None else (max(0.0, ci[0]), min(1.0, ci[1]))
        over = "trials"
    return {"mean": round(sum(values) / len(values), 3), "ci95": None if ci is None else [round(ci[0], 3), round(ci[1], 3)],
            "over": over}


PROTOCOL_LINES = {
    "paper": "the paper's protocol: the tasks in one chat in the paper's order; intervened: each interrupted at half "
             "its required actions and resumed in a second round, every task probed after its resumption; consecutive: "
             "back to back; standalone: a chat per task; a row's rates are over its tasks",
    "pairs": "the pairs deviation (not the paper's): two tasks per case, only the first interrupted and probed (before "
             "it is resumed), every conversation a new console; a row's success needs both tasks",
}


def task_rows(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A results line as rows of one task each: every task of a paper case (its own success, retention,
    actions; the case's worker counts on its first task only), the first task of a pair."""
    tasks = list(row.get("tasks") or [row["first"]])
    if row.get("protocol", "pairs") == "pairs":
        own = bool((row.get("done") or {}).get(row["first"], row["success"]))
        return [{**row, "task": row["first"], "success": own}]
    out = []
    for i, task in enumerate(tasks):
        probes = (row.get("probes") or {}).get(task, {})
        out.append({"trial": row.get("trial", 0), "task": task, "success": bool(row["done"][task]),
                    "task_retention": probes.get("task", {}).get("score"),
                    "environment_retention": probes.get("environment", {}).get("score"),
                    "actions": row["task_actions"][task], "required_actions": row["required"][task],
                    "violations": len(row["violations"][task]), "worker": row.get("worker") if i == 0 else None})
    return out


def _group(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    required = sum(r["required_actions"] for r in rows)
    workers = [r["worker"] for r in rows if r.get("worker")]
    out: dict[str, Any] = {"cases": len(rows), "trials": len({int(r.get("trial", 0)) for r in rows}),
                           **{k: rate(rows, k) for k in RATES},
                           "actions_per_required": round(sum(r["actions"] for r in rows) / required, 3) if required else None,
                           "violations": sum(int(r.get("violations", 0)) for r in rows)}
    if workers:
        out["worker"] = {k: sum(int(w[k]) for w in workers) for k in ("calls", "failures", "fallbacks")}
        out["worker"]["cases_with_failures"] = sum(1 for w in workers if w["failures"])
    return out


def summarise(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per protocol, method and mode: rows (tasks of the paper's cases; cases of pairs), trials, success, task
    and environment retention (each with its 95 % interval), actions per required action, violations, the
    worker's calls, failures and fallbacks; under ``by_task`` the same per task (the paper's Tables II-IV),
    a task's success its own."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    tasks: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        protocol = str(row.get("protocol", "pairs"))
        per_task = task_rows(row)
        if protocol == "pairs":
            violations = sum(len(v) for v in (row.get("violations") or {}).values())
            groups.setdefault((protocol, row["method"], row["mode"]), []).append({**row, "violations": violations})
        else:
            groups.setdefault((protocol, row["method"], row["mode"]), []).extend(per_task)
        for r in per_task:
            tasks.setdefault((protocol, row["method"], row["mode"], r["task"]), []).append(
                {**r, "violations": r["violations"] if isinstance(r.get("violations"), int) else
                 len((r.get("violations") or {}).get(r["task"], []))})
    out: dict[str, Any] = {}
    order = {m: i for i, m in enumerate((*PROTOCOLS, *METHODS, *MODES))}

    def rank(key: tuple[str, str, str]) -> tuple[Any, ...]:
        return tuple(x for k in key for x in (order.get(k, 99), k))

    for key, group in sorted(groups.items(), key=lambda kv: rank(kv[0])):
        protocol, method, mode = key
        by_task = {t: _group(g) for (p, m, o, t), g in tasks.items() if (p, m, o) == key}
        out.setdefault(protocol, {}).setdefault(method, {})[mode] = {**_group(group), "by_task": by_task}
    return out


def _rate_cell(value: Mapping[str, Any] | None) -> str:
    if value is None:
        return "-"
    ci = value.get("ci95")
    return cell(value["mean"], 2) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def format_table(summary: Mapping[str, Any], by_task: bool = False) -> str:
    """The summary as a Markdown table (``by_task``: a row per protocol, method, mode and task)."""
    head = "| protocol | method | mode |" + (" task |" if by_task else "") + " rows | success | task retention |" \
           " environment retention | actions / required | violations | worker failures / fallbacks |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for protocol, methods in summary.items():
        for method, modes in methods.items():
            for mode, s in modes.items():
                rows = list(s["by_task"].items()) if by_task else [("", s)]
                for task, g in rows:
                    worker = g.get("worker")
                    cells = [_rate_cell(g[k]) for k in RATES] + [
                        cell(g["actions_per_required"], 2), str(g.get("violations", 0)),
                        f"{worker['failures']} / {worker['fallbacks']}" if worker else "-"]
                    lines.append(f"| {protocol} | {method} | {mode} |" + (f" {task} |" if by_task else "")
                                 + f" {g['cases']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_summary(out: Path) -> tuple[Path, str]:
    """summary.json and report.md from results.jsonl; returns the report's path and the table."""
    rows = read_results(out)
    summary = summarise(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = format_table(summary)
    failed = []
    for r in rows:
        for task, ok in (r.get("done") or {}).items():
            if not ok:
                why = (r.get("violations") or {}).get(task) or ["goals not all done"]
                failed.append(f"- {r.get('protocol', 'pairs')} {r['method']} {r['mode']} {task} (trial {r.get('trial', 0)}): "
                              + "; ".join(why[:3]) + (f" (+{len(why) - 3} more)" if len(why) > 3 else ""))
    problems = [f"- {r['method']} {r['mode']} {r['first']} (trial {r.get('trial', 0)}): " + "; ".join(r["worker"]["problems"])
                for r in rows if r.get("worker") and r["worker"]["problems"]]
    protocols = [p for p in PROTOCOLS if p in summary]
    plot = plot_summary(summary, out / "multitask.png") if summary else None
    report = out / "report.md"
    report.write_text("# Multi-task benchmark (task memory)\n\nModels: " + ", ".join(sorted({r['models'] for r in rows}))
                      + "\n\nProtocol: " + "; ".join(f"**{p}**, {PROTOCOL_LINES[p]}" for p in protocols) + ".\n\n"
                      + "Success is strict (every goal done and no action on a non-goal object while the task was asked "
                        "for, none on it while it was stopped). Rates with 95 % intervals (Wilson over the rows of one "
                        "trial, t over the trials' rates).\n\n"
                      + table + "\n\n## Per task (the paper's Tables II-IV)\n\n" + format_table(summary, by_task=True)
                      + (f"\n\n![success and retention]({plot.name})" if plot else "")
                      + "\n\n## Failed tasks\n\n" + ("\n".join(failed) or "(none)")
                      + "\n\n## Worker failures\n\n" + ("\n".join(problems) or "(none)") + "\n")
    return report, table


def plot_summary(summary: Mapping[str, Any], path: Path) -> Path:
    """Bars of success, task retention and environment retention per mode, one group of bars per protocol and method."""
    import matplotlib  # deferred: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib

    metrics = (("success", "success rate"), ("task_retention", "task retention"), ("environment_retention", "environment retention"))
    series = {(f"{method}" if len(summary) == 1 else f"{protocol} {method}"): by_mode
              for protocol, methods in summary.items() for method, by_mode in methods.items()}
    modes = [m for m in MODES if any(m in by_mode for by_mode in series.values())]
    fig, axes = plt.subplots(1, len(metrics), figsize=(11, 3.2), sharey=True)
    width = 0.8 / max(len(series), 1)
    for ax, (key, title) in zip(axes, metrics, strict=True):
        for i, (label, by_mode) in enumerate(series.items()):
            values = [((by_mode.get(m) or {}).get(key) or {}).get("mean") for m in modes]
            ax.bar([x + i * width for x in range(len(modes))], [v if v is not None else 0.0 for v in values], width, label=label)
        ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(modes))], modes)
        ax.set(title=title, ylim=(0, 1.05))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
