"""``teachbot eval cap ...`` runs the core paper's tabletop protocol; ``teachbot eval report DIR`` writes its report;
``teachbot eval raider`` runs the issue-detection benchmark (teachbot.commands.eval_raider), ``teachbot eval droc``
DROC's corrections per iteration, ``teachbot eval multitask`` the multi-task benchmark of the task memory.

    teachbot eval cap --methods ours,ours-no-learning --splits SA-SI,UA-UI --runs 10 \\
        --llm-base-url URL --llm-model NAME --out DIR [--workers N] [--templates N] [--person template|llm]
    teachbot eval report DIR
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.commands import eval_droc, eval_multitask, eval_raider
from teachbot.commands.llm_args import (
    add_role_arguments,
    apply_role_arguments,
    check_endpoint,
    configured_roles,
    llm_config,
    price_table,
    role_models,
)
from teachbot.errors import ConfigError

STAND_INS = ("oracle", "err-once", "imitator", "reader")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``eval`` parser with its ``cap`` and ``report`` subcommands."""
    ev = sub.add_parser("eval", help="evaluate the robot: the core paper's tabletop protocol, and its report")
    kinds = ev.add_subparsers(dest="eval_command", required=True)
    cap = kinds.add_parser("cap", help="the Code-as-Policies tabletop protocol (s, i, n per split)")
    cap.add_argument("--methods", default="ours", help="comma-separated: ours, ours-no-learning, ours-no-retrieval, "
                     "ours-no-improve, ours-k4, and the baselines cap, dynamic-cap, helper (default ours)")
    cap.add_argument("--splits", default="SA-SI,UA-SI,UA-UI", help="comma-separated splits (default all three)")
    cap.add_argument("--runs", type=int, default=10, help="runs per template (default 10)")
    cap.add_argument("--templates", type=int, default=0, help="only the first N templates of each split (default all)")
    cap.add_argument("--template", action="append", default=[], metavar="KEY", help="only this template (repeatable)")
    cap.add_argument("--seed", type=int, default=0, help="the sweep's seed: scenes and the person's sentences")
    cap.add_argument("--trials", type=int, default=1, metavar="N",
                     help="repeat the whole schedule N times with other seeds (trial 0 has --seed's), each trial learning "
                          "from scratch in its own store; the report gives means with 95%% t-intervals over the trials "
                          "(default 1: Wilson intervals over the runs)")
    cap.add_argument("--out", required=True, help="output directory (a new one, or the same sweep's to resume)")
    cap.add_argument("--workers", type=int, default=1, help="isolated stacks running methods in parallel")
    cap.add_argument("--person", default="template", choices=("template", "llm"), help="the simulated person")
    cap.add_argument("--remember-share", type=float, default=0.5, help="share of corrections that ask to remember")
    cap.add_argument("--max-corrections", type=int, default=3, help="corrections per run before it fails")
    cap.add_argument("--run-timeout", type=float, default=300.0,
                     help="seconds of robot motion one run may take (the paper's timeout; the model's latency does not count)")
    cap.add_argument("--estimate", action="store_true",
                     help="print the sweep's LLM calls, tokens and cost per method (a range, with its assumptions) and "
                          "stop: nothing is sent to any endpoint")
    cap.add_argument("--max-cost", type=float, default=0.0, metavar="USD",
                     help="start no run once the recorded runs cost this much (config/prices.yaml); the same command with "
                          "a higher cap goes on (default: no cap)")
    cap.add_argument("--deviation", action="append", default=[], metavar="NAME",
                     help="a named deviation from the paper's protocol, off by default (repeatable): "
                          "continue-after-errors, wall-clock-timeout, rehearse-lessons (a lesson is kept only when its "
                          "replay from the run's first scene ends where the person accepted the task); the report says "
                          "which were on")
    cap.add_argument("--llm-base-url", default="", metavar="URL", help="OpenAI-compatible endpoint")
    cap.add_argument("--llm-model", default="", metavar="NAME", help="model name the endpoint serves")
    cap.add_argument("--llm-config", default="", metavar="FILE", help="LLM config file (default config/llm.yaml)")
    add_role_arguments(cap)
    cap.add_argument("--stand-in", default="", choices=("", *STAND_INS),
                     help="no LLM: a stand-in model. oracle, err-once, imitator are told the task's expert plan and "
                          "prove the harness, not any model (baselines: the plan as one program); reader reads only its "
                          "prompt (teachbot.evaluation.reading_doubles) and proves that a method learns")
    cap.add_argument("--stand-in-confusion", type=float, default=0.5, metavar="SHARE",
                     help="reader: the seeded share of the table's named places it mixes up (default 0.5)")
    cap.add_argument("--stand-in-slip", type=float, default=0.0, metavar="SHARE",
                     help="reader: the seeded share of its tutor's lessons that are wrong (default 0)")
    cap.add_argument("--no-progress", action="store_true", help="no progress bar")
    cap.set_defaults(func=run_cap)
    eval_raider.register(kinds)
    eval_droc.register(kinds)
    eval_multitask.register(kinds)
    report = kinds.add_parser("report", help="summary.json, report.md and plots of an evaluation directory")
    report.add_argument("directory")
    report.set_defaults(func=run_report)
    show = kinds.add_parser("show", help="one run's story from its trace: the LLM calls and replies, retrievals, lessons, "
                                         "statements and skills (no RUN: the list of runs)")
    show.add_argument("directory", help="the --out directory of a teachbot eval command")
    show.add_argument("run", nargs="?", default="", help="a line number of results.jsonl, or the run's name as listed "
                                                          "(cap: method/split/template/run, then /trial-T when a sweep has trials)")
    show.set_defaults(func=run_show)


@dataclass(frozen=True)
class CliModels:
    """The models of every method: from config/llm.yaml and the command line, or a stand-in (picklable for workers)."""

    llm: dict[str, Any]
    stand_in: str = ""
    confusion: float = 0.5  # the reader's misconception and its tutor's slips (seeded by the sweep's seed)
    slip: float = 0.0
    seed: int = 0

    def __call__(self, method: Any) -> Any:
        from teachbot.evaluation.harness import AgentModels  # deferred: loaded when the command runs

        if self.stand_in == "reader":  # reads only its prompt: the same misconception for every method
            from teachbot.evaluation import reading_doubles as reading  # deferred: loaded when the command runs

            tutor = reading.TutorModel(self.slip, self.seed)
            if method.kind != "console":
                return AgentModels(reading.ReaderProgramModel(self.confusion, self.seed), None, tutor)
            return AgentModels(reading.ReaderModel(self.confusion, self.seed), None, tutor)
        if self.stand_in:
            from teachbot.evaluation import doubles  # deferred: loaded when the command runs

            if method.kind != "console":  # the baselines write whole programs: the plan as one program
                from teachbot.evaluation.baselines import PlanProgramModel  # deferred: loaded when the command runs

                return AgentModels(PlanProgramModel(), None, doubles.TeacherModel())
            interaction = {"oracle": doubles.OracleModel, "err-once": doubles.ErrOnceModel,
                           "imitator": doubles.ImitatorModel}[self.stand_in]()
            return AgentModels(interaction, None, doubles.TeacherModel())
        from teachbot.llm.factory import model_from_config  # deferred: loaded when the command runs

        person = "person" if "person" in configured_roles(self.llm) else "interaction"  # the person's own model, if given
        return AgentModels(model_from_config(self.llm, "interaction"), model_from_config(self.llm, "function_generation"),
                           model_from_config(self.llm, "improvement"), person=model_from_config(self.llm, person))


def run_cap(args: argparse.Namespace) -> int:
    """Run (or resume) the sweep, then write the report."""
    from teachbot.evaluation.benchmark import SPLITS  # deferred: loaded when the command runs
    from teachbot.evaluation.report import write_report  # deferred: loaded when the command runs
    from teachbot.nodes.eval_sweep import run_sweep, spent  # deferred: loaded when the command runs
    from teachbot.tracing.setup import trace_into  # deferred: opentelemetry, loaded when the command runs

    trace_into(Path(args.out) / "traces", "teachbot-eval-cap")  # every run's trace beside its results (their trace_id)

    splits = tuple(s.strip() for s in args.splits.split(",") if s.strip())
    for split in splits:
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    raw = apply_role_arguments(llm_config(args), args)
    if args.estimate:
        return _estimate(args, raw, splits)
    if args.stand_in:
        where: dict[str, Any] = {"stand_in": args.stand_in}
        if args.stand_in == "reader":
            for name in ("stand_in_confusion", "stand_in_slip"):
                if not 0.0 <= getattr(args, name) <= 1.0:
                    raise ConfigError(f"--{name.replace('_', '-')} is a share within 0..1, got {getattr(args, name)}")
            where.update(confusion=args.stand_in_confusion, slip=args.stand_in_slip)
    else:
        own = configured_roles(raw)
        roles = ("interaction", "function_generation", "improvement", *(("person",) if args.person == "llm" else ()))
        models = role_models(raw, roles)
        for role in (r for r in roles if r != "person" or "person" in own):
            check_endpoint(raw, role)  # each role's endpoint answers before anything runs (GET /models bills nothing)
        where = {"roles": models, "prices": price_table(models)}
    config = _sweep_config(args, splits, llm=where, run_timeout=args.run_timeout, deviations=tuple(args.deviation))
    results = run_sweep(config, Path(args.out), CliModels(raw, args.stand_in, args.stand_in_confusion,
                                                                   args.stand_in_slip, args.seed), workers=args.workers,
                        show_progress=not args.no_progress and sys.stderr.isatty(), max_cost=args.max_cost)
    cost = spent(Path(args.out))
    if args.max_cost and cost >= args.max_cost:
        print(f"stopped at the cost cap: the recorded runs cost ${cost:.4f} of --max-cost {args.max_cost:g}; "
              "the same command with a higher --max-cost goes on", flush=True)
    report = write_report(results.parent, _published())
    print(f"results: {results}\nreport: {report}", flush=True)
    return 0


def _published() -> dict[str, dict[str, Any]]:
    from teachbot.config import load_yaml  # deferred: loaded when the command runs
    from teachbot.paths import config_path  # deferred: loaded when the command runs

    protocol = load_yaml(config_path("benchmarks", "cap_tabletop.yaml"))["protocol"]
    return {"core paper, GPT-4": protocol["published_results_gpt4"], "core paper, GPT-3.5": protocol["published_results_gpt35"]}


def _estimate(args: argparse.Namespace, raw: dict[str, Any], splits: tuple[str, ...]) -> int:
    """Print what the sweep would cost, and send nothing."""
    from teachbot.evaluation.estimate import estimate, render  # deferred: loaded when the command runs
    from teachbot.evaluation.harness import METHODS  # deferred: loaded when the command runs
    from teachbot.evaluation.sweep import validate  # deferred: loaded when the command runs
    from teachbot.llm.pricing import PriceTable  # deferred: loaded when the command runs
    from teachbot.nodes.eval_sweep import all_tasks  # deferred: loaded when the command runs

    config = _sweep_config(args, splits)
    tasks = all_tasks()
    validate(config, tasks, list(METHODS))
    roles = {role: settings["model"] for role, settings in role_models(
        raw, ("interaction", "function_generation", "improvement", "person")).items()}
    table = PriceTable.load()
    prices = {model: table.price(model) for model in roles.values()}
    print(render(estimate(config, tasks, prices, roles), roles, prices), flush=True)
    return 0


def _sweep_config(args: argparse.Namespace, splits: tuple[str, ...], **fields: Any) -> Any:
    """The SweepConfig the command line asks for (``fields``: what only a run records, such as the models)."""
    from teachbot.evaluation.person import PersonConfig  # deferred: loaded when the command runs
    from teachbot.evaluation.sweep import SweepConfig  # deferred: loaded when the command runs

    return SweepConfig(
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()), splits=splits, runs=args.runs,
        templates=args.templates, only=tuple(args.template), seed=args.seed, trials=args.trials,
        person=PersonConfig(kind=args.person, max_corrections=args.max_corrections, remember_share=args.remember_share),
        **fields)


def run_show(args: argparse.Namespace) -> int:
    """List the runs of an evaluation directory, or tell one run's story."""
    from teachbot.evaluation.audit import runs, story  # deferred: opentelemetry, loaded when the command runs

    if not args.run:
        for line in runs(args.directory):
            print(f"{line.number:5d}  {line.key:60} {line.outcome:10} {line.trace_id or '(no trace)'}")
        return 0
    print(story(args.directory, args.run), flush=True)
    return 0


def run_report(args: argparse.Namespace) -> int:
    """summary.json, report.md and the plots of a finished (or partial) sweep."""
    from teachbot.evaluation.report import write_report  # deferred: loaded when the command runs

    directory = Path(args.directory)
    if not (directory / "results.jsonl").is_file():
        raise ConfigError(f"{directory} has no results.jsonl; pass the --out directory of `teachbot eval cap`")
    print(write_report(directory, _published()), flush=True)
    return 0
