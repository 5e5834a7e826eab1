"""The multi-task benchmark's summary and report (teachbot.evaluation.multitask): per method and mode, and
per task as the paper's Tables II-IV, each rate with its 95 % interval; the worker's failures and fallbacks."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from teachbot.evaluation.metrics import t_interval, wilson
from teachbot.evaluation.multitask import METHODS, MODES, RATES, read_results
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


def _group(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    required = sum(r["required_actions"] for r in rows)
    workers = [r["worker"] for r in rows if r.get("worker")]
    out: dict[str, Any] = {"cases": len(rows), "trials": len({int(r.get("trial", 0)) for r in rows}),
                           **{k: rate(rows, k) for k in RATES},
                           "actions_per_required": round(sum(r["actions"] for r in rows) / required, 3) if required else None}
    if workers:
        out["worker"] = {k: sum(int(w[k]) for w in workers) for k in ("calls", "failures", "fallbacks")}
        out["worker"]["cases_with_failures"] = sum(1 for w in workers if w["failures"])
    return out


def summarise(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per method and mode: cases, trials, success, task and environment retention (each with its 95 %
    interval), actions per required action, the worker's calls, failures and fallbacks; under ``by_task``
    the same per first task (the paper's Tables II-IV), its success that task's own (a case's success needs
    both of its tasks done)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    tasks: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["mode"]), []).append(row)
        own = bool((row.get("done") or {}).get(row["first"], row["success"]))
        tasks.setdefault((row["method"], row["mode"], row["first"]), []).append({**row, "success": own})
    out: dict[str, Any] = {}
    order = {m: i for i, m in enumerate((*METHODS, *MODES))}
    for (method, mode), group in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][0], order.get(kv[0][1], 99))):
        out.setdefault(method, {})[mode] = {**_group(group), "by_task": {
            task: _group(g) for (m, o, task), g in sorted(tasks.items()) if (m, o) == (method, mode)}}
    return out


def _rate_cell(value: Mapping[str, Any] | None) -> str:
    if value is None:
        return "-"
    ci = value.get("ci95")
    return cell(value["mean"], 2) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def format_table(summary: Mapping[str, Any], by_task: bool = False) -> str:
    """The summary as a Markdown table (``by_task``: a row per method, mode and first task)."""
    head = "| method | mode |" + (" task |" if by_task else "") + " cases | success | task retention | environment retention |" \
           " actions / required | worker failures / fallbacks |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for method, modes in summary.items():
        for mode, s in modes.items():
            rows = [(t, g) for t, g in s["by_task"].items()] if by_task else [("", s)]
            for task, g in rows:
                worker = g.get("worker")
                cells = [_rate_cell(g[k]) for k in RATES] + [cell(g["actions_per_required"], 2),
                                                             f"{worker['failures']} / {worker['fallbacks']}" if worker else "-"]
                lines.append(f"| {method} | {mode} |" + (f" {task} |" if by_task else "") + f" {g['cases']} | "
                             + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_summary(out: Path) -> tuple[Path, str]:
    """summary.json and report.md from results.jsonl; returns the report's path and the table."""
    rows = read_results(out)
    summary = summarise(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = format_table(summary)
    failed = [f"- {r['method']} {r['mode']} {r['first']}{'+' + r['second'] if r['second'] else ''} (trial {r.get('trial', 0)}): "
              f"done {r['done']}, stops {r['stops']}" for r in rows if not r["success"]]
    problems = [f"- {r['method']} {r['mode']} {r['first']} (trial {r.get('trial', 0)}): " + "; ".join(r["worker"]["problems"])
                for r in rows if r.get("worker") and r["worker"]["problems"]]
    plot = plot_summary(summary, out / "multitask.png") if summary else None
    report = out / "report.md"
    report.write_text("# Multi-task benchmark (task memory)\n\nModels: " + ", ".join(sorted({r['models'] for r in rows}))
                      + "\n\nRates with 95 % intervals (Wilson over the cases of one trial, t over the trials' rates).\n\n"
                      + table + "\n\n## Per task\n\n" + format_table(summary, by_task=True)
                      + (f"\n\n![success and retention]({plot.name})" if plot else "")
                      + "\n\n## Failed cases\n\n" + ("\n".join(failed) or "(none)")
                      + "\n\n## Worker failures\n\n" + ("\n".join(problems) or "(none)") + "\n")
    return report, table


def plot_summary(summary: Mapping[str, Any], path: Path) -> Path:
    """Bars of success, task retention and environment retention per mode, one group of bars per method."""
    import matplotlib  # deferred: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib

    metrics = (("success", "success rate"), ("task_retention", "task retention"), ("environment_retention", "environment retention"))
    modes = [m for m in MODES if any(m in by_mode for by_mode in summary.values())]
    fig, axes = plt.subplots(1, len(metrics), figsize=(11, 3.2), sharey=True)
    width = 0.8 / max(len(summary), 1)
    for ax, (key, title) in zip(axes, metrics, strict=True):
        for i, (method, by_mode) in enumerate(summary.items()):
            values = [((by_mode.get(m) or {}).get(key) or {}).get("mean") for m in modes]
            ax.bar([x + i * width for x in range(len(modes))], [v if v is not None else 0.0 for v in values], width, label=method)
        ax.set_xticks([x + width * (len(summary) - 1) / 2 for x in range(len(modes))], modes)
        ax.set(title=title, ylim=(0, 1.05))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
