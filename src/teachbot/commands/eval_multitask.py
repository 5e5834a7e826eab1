"""``teachbot eval multitask``: the multi-task benchmark, with and without task memory (teachbot.evaluation.multitask).

    teachbot eval multitask --out DIR                                   # the paper's intervened protocol, memory vs no-memory, doubles
    teachbot eval multitask --methods memory,memory-extractor,no-memory --trials 5 --slip 0.05 --out DIR
    teachbot eval multitask --methods memory,memory-extractor,no-memory --trials 5 --wrong-object 0.1 --out DIR
    teachbot eval multitask --modes standalone,consecutive,intervened --out DIR   # the paper's Tables II, III and IV
    teachbot eval multitask --protocol pairs --modes intervened --tasks sort --methods memory --out DIR   # the pairs deviation
    teachbot eval multitask --models config --llm-base-url http://127.0.0.1:8000/v1 --llm-model NAME --out DIR
    teachbot eval multitask --models config --methods memory,memory-extractor,no-memory --allow-paid --out DIR

The default protocol is the paper's: the five tasks in one chat in its order, each interrupted at half its
required actions and resumed in a second round, the chat reset only at the end (mode ``intervened``;
``consecutive`` and ``standalone`` are its other modes). ``--protocol pairs`` is the older two-task deviation.
``memory`` is the paper's worker (the offline worker double, or the task_memory_worker role); a failing worker
is counted per case and nothing answers in its place unless --worker-fallback extractor says so.
``memory-extractor`` is the ablation whose working memory the judge's own definition of done makes.

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
METHODS = ("memory", "memory-extractor", "no-memory")  # teachbot.evaluation.multitask.METHODS (kept light)
MODES = ("standalone", "consecutive", "intervened")
PROTOCOLS = ("paper", "pairs")  # teachbot.evaluation.multitask_protocol.PROTOCOLS


def register(kinds: argparse._SubParsersAction) -> None:
    """Add ``multitask`` to the ``eval`` subcommands."""
    p = kinds.add_parser("multitask", help="the multi-task benchmark: the paper's five tasks interrupted and resumed in one "
                                           "chat (or consecutive, standalone), with and without task memory")
    p.add_argument("--methods", default="memory,no-memory", help=f"comma-separated: {', '.join(METHODS)} (default "
                   "memory,no-memory; memory-extractor: the ablation with the deterministic extractor)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="paper",
                   help="paper (default): the tasks in one chat in the paper's order; pairs: the two-task deviation")
    p.add_argument("--modes", default="intervened", help=f"comma-separated: {', '.join(MODES)} (default intervened, "
                   "the paper's Table IV)")
    p.add_argument("--tasks", default="", help="paper: only these tasks of the sequence; pairs: only cases whose first task "
                   "is one of these (comma-separated; default all)")
    p.add_argument("--trials", type=int, default=1, metavar="N",
                   help="run every case N times with other seeds; rates get 95%% t-intervals over the trials "
                        "(default 1: Wilson intervals over the cases)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (each case's and trial's seed is drawn from it)")
    p.add_argument("--slip", type=float, default=0.0,
                   help="offline doubles only: the chance that one decision of a stand-in goes wrong (default 0)")
    p.add_argument("--wrong-object", type=float, default=0.0, metavar="P",
                   help="offline doubles only: the seeded chance that the coordinator double grasps or points at a "
                        "thing at the task's place that the task is not about instead of the one it meant; the same "
                        "draws for every method (default 0)")
    p.add_argument("--worker-fallback", choices=("none", "extractor"), default="none",
                   help="what answers when the worker fails: none (the paper; counted) or the extractor (counted)")
    p.add_argument("--out", required=True, help="output directory (a new one, or the same run's to resume)")
    add_model_args(p, "offline coordinator doubles", "interaction and task_memory_worker roles")
    p.set_defaults(func=run)


def models(args: argparse.Namespace) -> Any:
    """The run's models: the coordinator and worker doubles, or config/llm.yaml's (refusing a paid endpoint
    without --allow-paid)."""
    from teachbot.evaluation.multitask import MultitaskModels  # deferred: loaded when the command runs

    fallback = args.worker_fallback == "extractor"
    if args.models == "doubles":
        from teachbot.evaluation.multitask_doubles import CoordinatorDouble  # deferred: loaded when the command runs
        from teachbot.evaluation.multitask_reading import Reader, WorkerDouble  # deferred: loaded when the command runs

        # deferred: pybullet, loaded when the command runs
        from teachbot.evaluation.multitask_world import multitask_catalog
        from teachbot.taskmemory import TaskMemoryConfig  # deferred: loaded when the command runs
        from teachbot.world.household_layout import HouseholdLayout  # deferred: loaded when the command runs

        catalog, config, places = multitask_catalog(), TaskMemoryConfig.load(), HouseholdLayout.load().names()
        worker = WorkerDouble(Reader.of(catalog, config.categories, places), args.slip)
        coordinator = CoordinatorDouble(catalog, config, places, args.slip, wrong_object=args.wrong_object)
        label = f"doubles (slip {args.slip:g}, wrong object {args.wrong_object:g})" if args.slip or args.wrong_object else "doubles"
        return MultitaskModels(coordinator, worker, label, fallback=fallback)
    if args.slip or args.wrong_object:
        raise ConfigError("--slip and --wrong-object set the offline doubles' imperfection; a model has its own")
    from teachbot.llm.factory import model_from_config  # deferred: loaded when the command runs

    raw, label = checked_llm_config(args, ROLES)
    return MultitaskModels(model_from_config(raw, "interaction"), model_from_config(raw, "task_memory_worker"), label,
                           fallback)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the benchmark, then write summary.json and report.md and print the table."""
    from teachbot.evaluation.multitask import MultitaskConfig, run_multitask  # deferred: loaded when the command runs
    from teachbot.evaluation.multitask_report import write_summary  # deferred: loaded when the command runs
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
    if args.trials < 1 or not 0.0 <= args.slip < 1.0 or not 0.0 <= args.wrong_object < 1.0:
        raise ConfigError(f"--trials must be 1 or more, --slip and --wrong-object in [0, 1), got {args.trials}, "
                          f"{args.slip} and {args.wrong_object}")
    chosen = models(args)
    show = (lambda line: print(line, file=sys.stderr, flush=True)) if sys.stderr.isatty() else (lambda _line: None)
    results = run_multitask(Path(args.out), chosen, methods=methods, modes=modes, tasks=tasks, config=config,
                            trials=args.trials, seed=args.seed, protocol=args.protocol, progress=show)
    report, table = write_summary(results.parent)
    print(f"multi-task benchmark ({chosen.label}, protocol {args.protocol}):\n{table}\nresults: {results}\nreport: {report}", flush=True)
    return 0
