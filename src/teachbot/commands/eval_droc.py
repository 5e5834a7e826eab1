"""``teachbot eval droc``: DROC's evaluation, corrections per iteration (see teachbot.evaluation.droc).

    teachbot eval droc --out DIR                                     # every method and task, offline doubles
    teachbot eval droc --trials 3 --noise 0.1 --out DIR              # 3 seeds of the doubles' reading noise: mean ± SE
    teachbot eval droc --methods droc,cap --tasks thin_coaster,my_cup --iterations 3 --max-corrections 4 --out DIR
    teachbot eval droc --models config --llm-base-url http://127.0.0.1:8000/v1 --llm-model NAME --out DIR
    teachbot eval droc --models config --allow-paid --out DIR        # config/llm.yaml's hosted endpoint: costs money

The same command with the same --out resumes: episodes already in results.jsonl are skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from teachbot.commands._args import add_model_args, comma_names
from teachbot.commands.llm_args import checked_llm_config

ROLES = ("interaction", "correction", "improvement")  # the console, the correction handler, the knowledge extractor
# teachbot.evaluation.droc.METHODS (kept light); droc-all-history, the old name of droc-retrieve-all, is still accepted
DEFAULT_NOISE = 0.1  # the doubles' reading noise unless --noise says otherwise
METHODS = ("droc", "droc-full-history", "droc-no-prior", "droc-retrieve-all", "droc-no-visual", "ours-r", "droc-rule-skills", "cap")


def register(kinds: argparse._SubParsersAction) -> None:
    """Add ``droc`` to the ``eval`` subcommands."""
    p = kinds.add_parser("droc", help="DROC's evaluation: corrections per iteration for DROC, its ablations and CaP")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated: {', '.join(METHODS)} (default all; "
                   "droc-full-history is the paper's Ours-E, the correction handler given the whole history; "
                   "droc-retrieve-all turns off the retrieval's selection and was called droc-all-history; "
                   "droc-rule-skills is the ablation whose skill knowledge comes by rule from the re-run calls, "
                   "not from the extractor's skill prompt)")
    p.add_argument("--tasks", default="", help="comma-separated task ids of config/benchmarks/droc/ (default all, "
                   "run in the config's order)")
    p.add_argument("--iterations", type=int, default=3, help="iterations per task, 1-3 (default 3)")
    p.add_argument("--max-corrections", type=int, default=4, help="corrections per episode before it counts as failed")
    p.add_argument("--store", default="shared", choices=("shared", "per-task"),
                   help="shared: one knowledge store per method across all tasks, as DROC's (default); per-task: "
                        "emptied when each task's sequence starts")
    p.add_argument("--trials", type=int, default=1, help="runs of the whole protocol, trial k with seed k (default 1); "
                   "the table gives mean ± standard error over them")
    p.add_argument("--noise", type=float, default=None, help="the offline doubles' reading noise, one level for every "
                   "method: the chance that one reading (a correction, a knowledge line, its dependence) goes wrong "
                   f"(default {DEFAULT_NOISE} with the doubles; configured models read as they do)")
    p.add_argument("--retrieval", default="paper", choices=("paper", "similarity"),
                   help="paper: DROC's order (preferences and constraints always, then the LLM picks the tasks of the "
                        "request's category, then the single best visual match; default); similarity: by text and looks")
    p.add_argument("--inject-learned", action="store_true", help="the labelled option: the console applies learned skill "
                   "parameters silently (default off: the knowledge block shows them and the model writes them)")
    p.add_argument("--no-looks", dest="looks", action="store_false", help="skip the upright/flipped retrieval of mesh cups "
                   "(teachbot.evaluation.droc_looks; by default once per trial, its accuracy in the report)")
    p.add_argument("--out", required=True, help="output directory (a new one, or the same run's to resume)")
    add_model_args(p, "offline stand-ins", "interaction, correction and improvement roles")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def config_models(args: argparse.Namespace) -> Any:
    """The run's models from config/llm.yaml (and --llm-*), refusing a paid endpoint without --allow-paid."""
    from teachbot.evaluation.droc import DrocModels  # deferred: loaded when the command runs
    from teachbot.llm.factory import model_from_config  # deferred: loaded when the command runs

    raw, label = checked_llm_config(args, ROLES)
    interaction = model_from_config(raw, "interaction")
    correction = model_from_config(raw, "correction")  # also the retrieval's task selection
    return DrocModels(interaction, interaction, correction, model_from_config(raw, "improvement"), label, selection=correction)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the evaluation, then write summary.json and report.md and print the table."""
    # deferred: loaded when the command runs
    from teachbot.evaluation.droc import DrocConfig, double_models, run_droc, write_summary
    from teachbot.evaluation.droc_tasks import load_tasks  # deferred: loaded when the command runs
    from teachbot.tracing.setup import trace_into  # deferred: opentelemetry, loaded when the command runs

    trace_into(Path(args.out) / "traces", "teachbot-eval-droc")  # every run's trace beside its results (their trace_id)

    from teachbot.evaluation.droc_report import RENAMED  # deferred: loaded when the command runs

    methods = comma_names(args.methods)
    for old in (m for m in methods if m in RENAMED):
        print(f"teachbot eval droc: method {old!r} is deprecated: it is {RENAMED[old]!r} now (it turns off the retrieval's "
              "selection; the paper's Ours-E, the handler given the whole history, is 'droc-full-history')", file=sys.stderr)
    config = DrocConfig(methods=tuple(RENAMED.get(m, m) for m in methods), tasks=comma_names(args.tasks), iterations=args.iterations,
                        max_corrections=args.max_corrections, shared_store=args.store == "shared", trials=args.trials, looks=args.looks,
                        retrieval=args.retrieval, inject=args.inject_learned,
                        noise=(DEFAULT_NOISE if args.models != "config" else 0.0) if args.noise is None else args.noise)
    tasks = load_tasks()
    config.validate([t.id for t in tasks])  # argument errors before any endpoint or simulator starts
    models = config_models(args) if args.models == "config" else double_models()
    config = dataclasses.replace(config, models=models.label)
    results = run_droc(config, Path(args.out), models, tasks=tasks, show_progress=not args.no_progress and sys.stderr.isatty())
    report, table = write_summary(results.parent)
    print(f"corrections per iteration ({models.label}):\n{table}\nresults: {results}\nreport: {report}", flush=True)
    return 0
