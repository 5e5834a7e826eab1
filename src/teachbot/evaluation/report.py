"""``report.md`` and the learning-curve plots of an evaluation directory, from its ``results.jsonl``.

The tables are laid out like the core paper's Tables 1 and 2 (s, i in percent and n, per split) with
the published GPT-4 and GPT-3.5 numbers beside ours; the plots show i and n over the run index per
split (the paper's learning curves), one line per method. Matplotlib draws off-screen (Agg).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teachbot.evaluation.metrics import RunRecord, learning_curve, read_results, summarize
from teachbot.evaluation.sweep import DEVIATIONS, SWEEP_FILE

SPLITS = ("SA-SI", "UA-SI", "UA-UI")


def _cell(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _row(name: str, by_split: dict[str, Any], splits: Sequence[str]) -> str:
    cells = []
    for split in splits:
        scores = by_split.get(split)
        if scores is None:
            cells += ["–", "–", "–"]
        else:
            cells += [_cell(scores["s"], 1), _cell(scores["i"], 1), _cell(scores["n"], 2)]
    return f"| {name} | " + " | ".join(cells) + " |"


def _table(summary: dict[str, dict[str, Any]], published: dict[str, dict[str, Any]], splits: Sequence[str]) -> list[str]:
    header = "| method | " + " | ".join(f"{s} s | {s} i | {s} n" for s in splits) + " |"
    lines = [header, "|" + "---|" * (1 + 3 * len(splits))]
    lines += [_row(f"**{method}**", by_split, splits) for method, by_split in sorted(summary.items())]
    lines += [_row(f"{name} (published)", by_split, splits) for name, by_split in published.items()]
    return lines


def _runs_table(summary_by_template: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| method | split | template | s | i | n | runs |", "|---|---|---|---|---|---|---|"]
    for method, splits in sorted(summary_by_template.items()):
        for split, templates in sorted(splits.items()):
            for template, scores in sorted(templates.items()):
                lines.append(f"| {method} | {split} | {template} | {_cell(scores['s'], 1)} | {_cell(scores['i'], 1)} | "
                             f"{_cell(scores['n'], 2)} | {scores['runs']} |")
    return lines


def plot_curves(records: Sequence[RunRecord], out: Path) -> list[Path]:
    """One PNG per split: i (%) and n over the run index, a line per method."""
    import matplotlib  # deferred: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib

    curves = learning_curve(records)
    written = []
    for split in sorted({split for _, split in curves}):
        fig, (ax_i, ax_n) = plt.subplots(1, 2, figsize=(9, 3.4))
        for (method, s), points in sorted(curves.items()):
            if s != split:
                continue
            runs = [run + 1 for run, _ in points]
            ax_i.plot(runs, [scores.i for _, scores in points], marker="o", label=method)
            ax_n.plot(runs, [scores.n if scores.n is not None else float("nan") for _, scores in points], marker="o",
                      label=method)
        ax_i.set(title=f"{split}: initial success i", xlabel="run", ylabel="i (%)", ylim=(-5, 105))
        ax_n.set(title=f"{split}: interactions until success n", xlabel="run", ylabel="n")
        ax_i.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"curve_{split}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _protocol_line(out: Path) -> str:
    """Which protocol the sweep ran: the paper's, or the named deviations that were on (sweep.json)."""
    sweep = out / SWEEP_FILE
    deviations = json.loads(sweep.read_text()).get("deviations") if sweep.is_file() else None
    if deviations is None:
        return "Protocol: not recorded (a sweep from before the deviations were named)."
    if not deviations:
        return "Protocol: the core paper's (an error or timeout ends a run; the clock counts robot time, not the model)."
    return "Protocol: the core paper's with these deviations on: " + "; ".join(f"{d} ({DEVIATIONS.get(d, '?')})" for d in deviations) + "."


def write_report(directory: str | Path, published: dict[str, dict[str, Any]] | None = None) -> Path:
    """Write summary.json, report.md and the plots for ``directory/results.jsonl``; returns report.md."""
    out = Path(directory)
    records = read_results(out / "results.jsonl")
    summary = summarize(records)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    present = {split for by_split in summary.values() for split in by_split}
    splits = [*SPLITS, *sorted(present - set(SPLITS))]  # the paper's three always, as in its tables
    plots = plot_curves(records, out)
    tokens = sum(r.tokens for r in records)
    cost = sum(r.cost_usd for r in records)
    wall = sum(r.wall_s for r in records)
    lines = [
        "# Evaluation report",
        "",
        f"{len(records)} runs, {tokens:,} LLM tokens, ${cost:.4f}, {wall / 60:.1f} min of runs.",
        _protocol_line(out),
        "s: runs that ended in success (%); i: runs successful at the first return of control, with no help (%);",
        "n: mean corrections until the first success, over successful runs. Published numbers: the core paper.",
        "",
        "## Results by split (the paper's Tables 1 and 2)",
        "",
        *_table(summary, published or {}, splits),
        "",
        "## Learning curves",
        "",
        *[f"![{p.stem}]({p.name})" for p in plots],
        "",
        "## By template",
        "",
        *_runs_table(summarize(records, by_template=True)),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
