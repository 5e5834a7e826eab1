"""``report.md`` and the learning-curve plots of an evaluation directory, from its ``results.jsonl``.

The tables are laid out like the core paper's Tables 1 and 2 (s, i in percent and n, per split) with
the published GPT-4 and GPT-3.5 numbers beside ours, each of ours with its 95 % interval in brackets
(teachbot.evaluation.metrics says which interval); the plots show i and n over the run index per split
(the paper's learning curves), one line per method with the same intervals as error bars. Matplotlib
draws off-screen (Agg).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teachbot.evaluation.metrics import OVER_RUNS, OVER_TRIALS, RunRecord, Scores, learning_curve, read_results, summarize
from teachbot.evaluation.sweep import DEVIATIONS, SWEEP_FILE

SPLITS = ("SA-SI", "UA-SI", "UA-UI")


INTERVALS = {
    OVER_RUNS: "one trial: a Wilson score interval for s and i (each run a binomial draw), a Student-t interval for n "
               "over the successful runs' corrections",
    OVER_TRIALS: "several trials: each score is the mean over the trials (the schedule repeated with other seeds, each "
                 "trial learning from scratch), with a Student-t interval over the per-trial scores",
}


def _cell(value: float | None, digits: int, ci: Sequence[float] | None = None) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" + ("" if ci is None else f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]")


def _row(name: str, by_split: dict[str, Any], splits: Sequence[str]) -> str:
    cells = []
    for split in splits:
        scores = by_split.get(split)
        if scores is None:
            cells += ["–", "–", "–"]
        else:
            ci = scores.get("ci95") or {}
            cells += [_cell(scores["s"], 1, ci.get("s")), _cell(scores["i"], 1, ci.get("i")),
                      _cell(scores["n"], 2, ci.get("n"))]
    return f"| {name} | " + " | ".join(cells) + " |"


def _interval_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Which 95 % intervals the table's brackets are (over runs, over trials, or both in a partial sweep)."""
    cells = [scores for by_split in summary.values() for scores in by_split.values()]
    if not cells:
        return []
    overs = sorted({scores["ci95"]["over"] for scores in cells})
    trials = max(scores["trials"] for scores in cells)
    kinds = "; ".join(("cells of " if len(overs) > 1 else "") + INTERVALS[over] for over in overs)
    return [f"95 % intervals in brackets and as error bars ({trials} trial{'s' if trials > 1 else ''}); {kinds}.",
            "A score without brackets has too few values for an interval (fewer than two)."]


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


def _bars(points: Sequence[tuple[int, Scores]], which: str) -> tuple[list[float], list[list[float]]]:
    """The values of ``which`` (i or n) at each run index and their error bars' lengths below and above (nan: none)."""
    values, below, above = [], [], []
    for _, scores in points:
        value, ci = getattr(scores, which), getattr(scores, f"{which}_ci")
        values.append(float("nan") if value is None else value)
        below.append(float("nan") if value is None or ci is None else max(0.0, value - ci[0]))
        above.append(float("nan") if value is None or ci is None else max(0.0, ci[1] - value))
    return values, [below, above]


def plot_curves(records: Sequence[RunRecord], out: Path) -> list[Path]:
    """One PNG per split: i (%) and n over the run index, a line per method with 95 % error bars."""
    import matplotlib  # deferred: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib

    curves = learning_curve(records)
    written = []
    for split in sorted({split for _, split in curves}):
        fig, (ax_i, ax_n) = plt.subplots(1, 2, figsize=(9, 3.4))
        lines = sorted((method, points) for (method, s), points in curves.items() if s == split)
        for index, (method, points) in enumerate(lines):
            shift = 0.08 * (index - (len(lines) - 1) / 2)  # the methods' bars side by side, not on top of each other
            runs = [run + 1 + shift for run, _ in points]
            for ax, which in ((ax_i, "i"), (ax_n, "n")):
                values, bars = _bars(points, which)
                ax.errorbar(runs, values, yerr=bars, marker="o", capsize=3, label=method)
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
    summary = summarize(records, intervals=True)
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
        *_interval_lines(summary),
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
