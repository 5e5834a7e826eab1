"""``teachbot eval multitask``: the multi-task benchmark, with and without task memory (teachbot.evaluation.multitask).

    teachbot eval multitask --out DIR                                   # every mode and pair, memory vs no-memory, offline doubles
    teachbot eval multitask --modes intervened --tasks sort,tower --methods memory --out DIR
    teachbot eval multitask --models config --llm-base-url http://127.0.0.1:8000/v1 --llm-model NAME --out DIR
    teachbot eval multitask --models config --methods memory,memory-worker,no-memory --allow-paid --out DIR

The same command with the same --out resumes: cases already in results.jsonl are skipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from teachbot.commands._args import add_model_args, comma_names
from teachbot.commands.llm_args import checked_llm_config
from teachbot.errors import ConfigError

ROLES = ("interaction", "task_memory_worker")
METHODS = ("memory", "memory-worker", "no-memory")  # teachbot.evaluation.multitask.METHODS (kept light)
MODES = ("standalone", "consecutive", "intervened")


def register(kinds: argparse._SubParsersAction) -> None:
    """Add ``multitask`` to the ``eval`` subcommands."""
    p = kinds.add_parser("multitask", help="the multi-task benchmark: standalone, consecutive and intervened tasks, "
                                           "with and without task memory")
    p.add_argument("--methods", default="memory,no-memory", help=f"comma-separated: {', '.join(METHODS)} (default "
                   "memory,no-memory; memory-worker needs --models config)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated: {', '.join(MODES)} (default all)")
    p.add_argument("--tasks", default="", help="only cases whose first task is one of these (comma-separated; default all)")
    p.add_argument("--out", required=True, help="output directory (a new one, or the same run's to resume)")
    add_model_args(p, "offline coordinator doubles", "interaction and task_memory_worker roles")
    p.set_defaults(func=run)


def models(args: argparse.Namespace) -> Any:
    """The run's models: the coordinator double, or config/llm.yaml's (refusing a paid endpoint without --allow-paid)."""
    from teachbot.evaluation.multitask import MultitaskModels  # deferred: loaded when the command runs

    if args.models == "doubles":
        from teachbot.evaluation.multitask_doubles import CoordinatorDouble  # deferred: loaded when the command runs

        # deferred: pybullet, loaded when the command runs
        from teachbot.evaluation.multitask_world import multitask_catalog

        return MultitaskModels(CoordinatorDouble(multitask_catalog()))
    from teachbot.llm.factory import model_from_config  # deferred: loaded when the command runs

    raw, label = checked_llm_config(args, ROLES)
    return MultitaskModels(model_from_config(raw, "interaction"), model_from_config(raw, "task_memory_worker"), label)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the benchmark, then write summary.json and report.md and print the table."""
    # deferred: loaded when the command runs
    from teachbot.evaluation.multitask import MultitaskConfig, run_multitask, write_summary
    from teachbot.tracing.setup import trace_into  # deferred: opentelemetry, loaded when the command runs

    trace_into(Path(args.out) / "traces", "teachbot-eval-multitask")  # every run's trace beside its results (their trace_id)

    methods, modes, tasks = comma_names(args.methods), comma_names(args.modes), comma_names(args.tasks)
    bad = [m for m in methods if m not in METHODS] + [m for m in modes if m not in MODES]
    if bad:
        raise ConfigError(f"unknown {bad}; methods: {', '.join(METHODS)}; modes: {', '.join(MODES)}")
    config = MultitaskConfig.load()
    unknown = [t for t in tasks if t not in config.tasks]
    if unknown:
        raise ConfigError(f"unknown tasks {unknown}; use some of {', '.join(config.tasks)}")
    if "memory-worker" in methods and args.models == "doubles":
        raise ConfigError("memory-worker needs a worker model: add --models config (role task_memory_worker of config/llm.yaml)")
    chosen = models(args)
    show = (lambda line: print(line, file=sys.stderr, flush=True)) if sys.stderr.isatty() else (lambda _line: None)
    results = run_multitask(Path(args.out), chosen, methods=methods, modes=modes, tasks=tasks, config=config, progress=show)
    report, table = write_summary(results.parent)
    print(f"multi-task benchmark ({chosen.label}):\n{table}\nresults: {results}\nreport: {report}", flush=True)
    return 0
