"""DROC's evaluation, its files: reading results.jsonl (old method names included) and the summary and report.

``summarise`` turns the results' lines into corrections per iteration (per task the mean over the iteration's
variants, then the mean over the tasks, per method); ``write_summary`` writes summary.json and report.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RESULTS, SETTINGS = "results.jsonl", "droc_settings.json"
log = logging.getLogger(__name__)

# old method names still read (command line, saved results and stores) -> their names now
RENAMED = {"droc-all-history": "droc-retrieve-all"}


def method_name(name: str, where: str = "the command line") -> str:
    """``name`` as it is called now; an old name is accepted with a deprecation warning (naming ``where``)."""
    new = RENAMED.get(name)
    if new is None:
        return name
    log.warning("DROC method %r (in %s) is deprecated: it is %r now (it turns off the retrieval's selection; the paper's "
                "Ours-E, the handler given the whole history, is 'droc-full-history')", name, where, new)
    return new


def read_results(out: Path) -> list[dict[str, Any]]:
    """The lines of ``out``'s results.jsonl; a renamed method's old name is read as its new one (with a warning)."""
    path = out / RESULTS
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for old in sorted({r.get("method") for r in rows} & RENAMED.keys()):
        new = method_name(old, str(path))
        for row in rows:
            if row.get("method") == old:
                row["method"] = new
    return rows


LEVELS = ("all", "skill", "plan")
PUBLISHED = ("DROC's paper (Zha et al., 2023, Fig. 2) reports, on a real robot arm: in the first round DROC needed "
             "about half as many corrections as Code as Policies, and after two rounds of teaching it needed few or "
             "none; CaP, which keeps nothing, is corrected again in every round.")


def summarise(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Corrections per iteration: per task the mean over the iteration's variants, then the mean over the
    tasks (all, skill-level, plan-level), per method; with the share of episodes done and per-task means."""
    cells: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    levels: dict[str, str] = {}
    for row in rows:
        cells.setdefault((row["method"], row["task"], int(row["iteration"])), []).append(row)
        levels[row["task"]] = row["level"]
    methods = list(dict.fromkeys(m for m, _, _ in cells))
    iterations = sorted({i for _, _, i in cells})
    per_task = {m: {t: {i: round(sum(r["corrections"] for r in rs) / len(rs), 3)
                        for (mm, tt, i), rs in sorted(cells.items()) if mm == m and tt == t}
                    for t in dict.fromkeys(t for mm, t, _ in cells if mm == m)} for m in methods}
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    success: dict[str, dict[str, float]] = {}
    for m in methods:
        table[m] = {}
        for level in LEVELS:
            row = {}
            for i in iterations:
                values = [v[i] for t, v in per_task[m].items() if i in v and (level == "all" or levels[t] == level)]
                row[str(i)] = round(sum(values) / len(values), 3) if values else None
            table[m][level] = row
        success[m] = {str(i): round(sum(r["success"] for (mm, _, ii), rs in cells.items() if mm == m and ii == i for r in rs)
                                    / max(1, sum(len(rs) for (mm, _, ii), rs in cells.items() if mm == m and ii == i)), 3)
                      for i in iterations}
    return {"iterations": iterations, "corrections": table, "success": success, "per_task": per_task,
            "episodes": sum(len(rs) for rs in cells.values()), "published": PUBLISHED}


def format_table(summary: Mapping[str, Any]) -> str:
    """The corrections-per-iteration table (markdown): a column per level and iteration."""
    its = summary["iterations"]
    head = ["method", *(f"{level} {i}" for level in LEVELS for i in its), *(f"done {i}" for i in its)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, levels in summary["corrections"].items():
        cells = [_cell(levels[level][str(i)]) for level in LEVELS for i in its]
        done = [f"{summary['success'][method][str(i)]:.0%}" for i in its]
        lines.append("| " + " | ".join([method, *cells, *done]) + " |")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def write_summary(out: Path) -> tuple[Path, str]:
    """summary.json and report.md of ``out``; returns report.md's path and the table."""
    rows = read_results(out)
    summary = summarise(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = format_table(summary)
    settings = json.loads((out / SETTINGS).read_text()) if (out / SETTINGS).is_file() else {}
    tasks = "\n".join(f"| {m} | {t} | " + " | ".join(_cell(v.get(i)) for i in summary["iterations"]) + " |"
                      for m, per in summary["per_task"].items() for t, v in per.items())
    lines = ["# DROC evaluation: corrections per iteration", "",
             f"Models: {settings.get('models', '?')}; at most {settings.get('max_corrections', '?')} corrections per episode; "
             f"{summary['episodes']} episodes. Per task the mean over the iteration's variants, then the mean over tasks "
             "(all, skill-level, plan-level tasks); 'done': the share of episodes that ended with the task done.", "",
             table, "", "## Per task", "", "| method | task | " + " | ".join(f"iter {i}" for i in summary["iterations"]) + " |",
             "|---|---|" + "---|" * len(summary["iterations"]), tasks, "", "## Published shape", "", PUBLISHED, ""]
    if settings.get("models") == "doubles":
        lines += ["With `--models doubles` these figures prove the mechanics (handler, extraction, retrieval, the "
                  "person from the ground truth), not any model's quality: see teachbot.evaluation.droc_doubles.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path, table
