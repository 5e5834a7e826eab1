"""``teachbot eval raider``: the issue-detection benchmark (see teachbot.evaluation.raider_benchmark).

    teachbot eval raider --method precond --out DIR                       # offline, no model
    teachbot eval raider --method raider --ablation QGEN_GRND --llm-base-url URL --llm-model NAME --out DIR
    teachbot eval raider --method precond --recovery --llm-base-url URL --llm-model NAME --out DIR  # + Recov_Plan
    teachbot eval raider --method raider --judge --recovery --judge-model NAME ... --trials 3 --out DIR
    teachbot eval raider --stand-in --ablation BASIC --out DIR                 # offline: a stand-in that reads its prompt
    teachbot eval raider --stand-in --recovery --recovery-stand-in --recovery-context scene --out DIR  # Table 2, offline

The paper's protocol is the default: profile paper (config/raider.yaml: tools that return facts, the zero-shot
Figure 4 prompt, call_tool{...}, its four warnings) and, for --method precond, the paper's Table B.3 action models.
Deviations are named options, off by default, and the report lists those that were on: --profile guided (teachbot's
variant before issue 28), --precond-checks broad.

Recov_Plan's planner sees the action, what the hand holds and the issue with its explanation (the paper's Figure 7);
--recovery-context scene or scene+explanation are the other rows of the paper's Table 2 (the visual-obs baseline's
scene description instead of, or beside, the explanation). --recovery-stand-in plans without a model
(teachbot.evaluation.raider_recovery_standin: it reads only its prompt).

The judge and the recovery planner are the --judge-model (on --judge-base-url, default the same endpoint) when
one is given, else the model under test; summary.json records which (models.judge_is_model_under_test).
A run started again with the same settings skips the checks it holds; a higher --trials adds trials.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from teachbot.commands.llm_args import check_endpoint, llm_config
from teachbot.errors import ConfigError


def register(kinds: argparse._SubParsersAction) -> None:
    """Add ``raider`` to the ``eval`` subcommands."""
    p = kinds.add_parser("raider", help="the issue-detection benchmark (RAIDER): Grnd, Det, Expl, Time per issue type")
    p.add_argument("--method", default="raider", choices=("raider", "precond", "visual-obs"),
                   help="raider: the agent; precond: predefined precondition checks (no model); visual-obs: the whole "
                        "scene described instead of tools")
    p.add_argument("--ablation", default="", choices=("", "BASIC", "QGEN", "GRND", "QGEN_GRND"),
                   help="the paper's prompt ablation (§4.2.2): BASIC, QGEN, GRND or QGEN_GRND, the full procedure "
                        "(default: config/raider.yaml)")
    p.add_argument("--profile", default="", choices=("", "paper", "guided"),
                   help="paper: the paper's protocol (default, config/raider.yaml); guided: a labelled deviation, teachbot's "
                        "variant before issue 28 (tools that judge reach and ambiguity, a checklist in the Ask step, a worked "
                        "example, no common sense, one 'Tool call:' per turn)")
    p.add_argument("--precond-checks", default="paper", choices=("paper", "broad"),
                   help="--method precond: paper, the paper's Table B.3 action models (default); broad, a labelled deviation, "
                        "teachbot's wider checker (reach, blockage, kind, sentences by keywords)")
    p.add_argument("--stand-in", action="store_true",
                   help="no LLM: --method raider with a stand-in that decides only from the text of its prompt and the tool "
                        "responses (teachbot.evaluation.raider_standin); it proves the harness, the ablation flags and the "
                        "warning path, not any model")
    p.add_argument("--stand-in-slip", type=float, default=0.1, metavar="SHARE",
                   help="the stand-in's seeded share of turns that go wrong in a way a warning catches (default 0.1)")
    p.add_argument("--seed", type=int, default=0, help="the stand-in's seed (default 0)")
    p.add_argument("--tool-calling", default="", choices=("", "text", "native"), help="default: config/raider.yaml")
    p.add_argument("--world", default="all", choices=("all", "tabletop", "household"), help="only this world's cases")
    p.add_argument("--cases", action="append", default=[], metavar="FILE", help="case files (default: config/benchmarks/raider/)")
    p.add_argument("--limit", type=int, default=0, help="only the first N cases (default all)")
    p.add_argument("--out", required=True, help="output directory (results.jsonl, summary.json, report.md)")
    p.add_argument("--llm-base-url", default="", metavar="URL", help="OpenAI-compatible endpoint")
    p.add_argument("--llm-model", default="", metavar="NAME", help="model name the endpoint serves")
    p.add_argument("--llm-config", default="", metavar="FILE", help="LLM config file (default config/llm.yaml)")
    p.add_argument("--judge", action="store_true",
                   help="also grade each explanation with an LLM judge (--judge-model, else the model under test)")
    p.add_argument("--recovery", action="store_true",
                   help="Recov_Plan: run the recovery plan of each right issue verdict in the case's world (needs a model: "
                        "--judge-model, else the model under test; also with --method precond)")
    p.add_argument("--recovery-context", default="explanation", choices=("explanation", "scene", "scene+explanation"),
                   help="what the recovery planner is told besides the action and the hand (the paper's Table 2): the issue's "
                        "explanation (default, the paper's prompt), the scene description instead, or both")
    p.add_argument("--recovery-stand-in", action="store_true",
                   help="--recovery without a model: a planner stand-in that reads only its prompt (proves the harness and "
                        "the judge, not any model)")
    p.add_argument("--judge-model", default="", metavar="NAME",
                   help="the model of the judge and the recovery planner, not the model under test (default: the model under "
                        "test, recorded as not independent)")
    p.add_argument("--judge-base-url", default="", metavar="URL", help="the judge model's endpoint (default: --llm-base-url)")
    p.add_argument("--trials", type=int, default=1, help="check every case N times (95 %% intervals over the trials)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the cases with the method; write results.jsonl, summary.json and report.md."""
    # deferred: pybullet, loaded when the command runs
    from teachbot.evaluation.raider_benchmark import checker_factory, open_output, run_cases
    from teachbot.evaluation.raider_cases import load_cases  # deferred: pybullet, loaded when the command runs
    from teachbot.evaluation.raider_report import write_outputs  # deferred: scipy, loaded when the command runs
    from teachbot.raider.config import RaiderConfig  # deferred: loaded when the command runs
    from teachbot.tracing.setup import trace_into  # deferred: opentelemetry, loaded when the command runs

    out = Path(args.out)
    if args.trials < 1:
        raise ConfigError(f"--trials must be 1 or more, got {args.trials}")
    cases = load_cases([Path(c) for c in args.cases] or None)
    if args.world != "all":
        cases = [c for c in cases if c.world == args.world]
    if args.limit:
        cases = cases[: args.limit]
    if not cases:
        raise ConfigError("no cases to run; check --world and --cases")
    config = RaiderConfig.load()
    if args.ablation:
        config = replace(config, prompt=args.ablation)
    if args.profile:
        config = replace(config, profile=args.profile, examples=args.profile == "guided" or config.examples)
    if args.stand_in and args.method != "raider":
        raise ConfigError("--stand-in stands in for the model of --method raider only")
    if not 0.0 <= args.stand_in_slip <= 1.0:
        raise ConfigError(f"--stand-in-slip is a share within 0..1, got {args.stand_in_slip}")
    if args.tool_calling:
        config = replace(config, tool_calling=args.tool_calling, tool_calling_by_model={})
    model, judge_model, models, on_trial = None, None, {}, None
    if args.recovery_stand_in and not args.recovery:
        raise ConfigError("--recovery-stand-in stands in for the recovery planner: give --recovery too")
    extras = (args.recovery and not args.recovery_stand_in) or args.judge
    if args.method == "precond" and extras and not (args.llm_base_url or args.llm_model or args.llm_config or args.judge_model):
        raise ConfigError("--recovery and --judge need a model; give --judge-model, or --llm-base-url and --llm-model (or --llm-config)")
    if args.stand_in:
        from teachbot.evaluation.raider_standin import RaiderStandIn  # deferred: loaded when the command runs

        stand_in = RaiderStandIn(args.stand_in_slip, args.seed)
        model = stand_in.native_model() if config.tool_calling_for("stand-in:raider") == "native" else stand_in.model()
        on_trial = stand_in.reseed
        models["under_test"] = f"stand-in (reads its prompt; slip {args.stand_in_slip:g}, seed {args.seed})"
        if extras and not args.judge_model:
            raise ConfigError("--recovery and --judge with --stand-in need a --judge-model (and --judge-base-url), "
                              "or --recovery-stand-in for --recovery")
    if (args.method != "precond" and not args.stand_in) or extras:
        from teachbot.llm.factory import model_from_config, role_settings  # deferred: loaded when the command runs

        raw = llm_config(args)
        if (args.method != "precond" and not args.stand_in) or not args.judge_model:
            check_endpoint(raw, "issue_detection")
            model = model_from_config(raw, "issue_detection")
            if args.method != "precond":
                models["under_test"] = str(role_settings(raw, "issue_detection").get("model") or model.name)
        judge_model = model
        if args.judge_model:
            judged = copy.deepcopy(raw)
            section = judged.setdefault("llm", {}) if "llm" in judged or not judged else judged
            roles = section.setdefault("roles", {}) or {}
            section["roles"] = roles
            base = role_settings(raw, "issue_detection")
            roles["issue_detection"] = {**base, "backend": "openai", "model": args.judge_model,
                                        "base_url": args.judge_base_url or base.get("base_url", "")}
            check_endpoint(judged, "issue_detection")
            judge_model = model_from_config(judged, "issue_detection")
        if extras:
            name = args.judge_model or str(role_settings(raw, "issue_detection").get("model") or judge_model.name)
            models.update(judge=name, **({} if args.recovery_stand_in else {"planner": name}),
                          judge_is_model_under_test=judge_model is model and args.method != "precond")
    recover = None
    if args.recovery:
        from teachbot.evaluation.raider_recovery import recovery_api  # deferred: pybullet, loaded when the command runs
        from teachbot.raider.recovery import RecoveryPlanner  # deferred: loaded when the command runs

        planner_model = judge_model
        if args.recovery_stand_in:
            from teachbot.evaluation.raider_recovery_standin import recovery_stand_in  # deferred: loaded when the command runs

            planner_model = recovery_stand_in()
            models["planner"] = "stand-in (reads its prompt)"
        # the tabletop cases get the tabletop API
        recover = RecoveryPlanner(planner_model, recovery_api("household"), args.recovery_context)
    judge = None
    if args.judge:
        from teachbot.evaluation.raider_judge import ExplanationJudge  # deferred: pybullet, loaded when the command runs

        judge = ExplanationJudge(judge_model)
    protocol = _protocol(args, config)
    settings = {"method": args.method, "ablation": config.prompt, "tool_calling": args.tool_calling, "world": args.world,
                "cases": sorted(args.cases), "limit": args.limit, "judge": args.judge, "recovery": args.recovery,
                **({"recovery_context": args.recovery_context} if args.recovery else {}),
                "models": models, "trials": args.trials, "protocol": protocol}
    done = open_output(out, settings)
    trace_into(out / "traces", "teachbot-eval-raider")  # every run's trace beside its results (their trace_id)
    bar = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm  # deferred: tqdm, loaded when the command runs

        bar = tqdm(total=len(cases) * args.trials, initial=len(done), unit="check", desc=args.method)
    scores = run_cases(cases, checker_factory(args.method, model, config, args.precond_checks), out,
                       progress=(lambda _s: bar.update(1)) if bar is not None else None, recover=recover, judge=judge,
                       trials=args.trials, done=done, on_trial=on_trial,
                       tool_style=config.tool_style if args.method != "precond" else "facts")
    if bar is not None:
        bar.close()
    summary = write_outputs(scores, out, args.method, models, protocol)
    o = summary["overall"]
    recovered = f", Recov_Plan {o['recov_plan']:.1f} % of {o['recov_n']}" if o.get("recov_plan") is not None else ""
    if o.get("expl_judge") is not None:
        recovered += f", Expl by the judge {o['expl_judge']:.1f} % of {o['judged_n']}"
    grnd = "-" if o["grnd"] is None else f"{o['grnd']:.1f} %"
    if o.get("warned_turns"):
        recovered += (f", warnings in {o['warned_turns']} turns (1-4: {', '.join(str(k) for k in o['warning_kinds'])}), "
                      f"corrected {o['corrected']} ({o['corrected_share']:.1f} %)")
    deviations = "; deviations: " + ", ".join(protocol["deviations"]) if protocol["deviations"] else ""
    print(f"{args.method}: {o['n']} checks, Grnd {grnd}, Det {o['det']:.1f} %, Expl {o['expl']:.1f} %, "
          f"{o['time']:.3f} s per check{recovered}{deviations}\nreport: {out / 'report.md'}", flush=True)
    return 0


def _protocol(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """How the run was set up, and its deviations from the paper's protocol (the report lists them)."""
    deviations: list[str] = []
    if args.method == "precond":
        out: dict[str, Any] = {"precond checks": args.precond_checks}
        if args.precond_checks == "broad":
            deviations.append("precond checks broad (teachbot's checker: more than Table B.3's action models)")
    else:
        out = {"profile": config.profile, "ablation": config.prompt,
               "tool calling": config.tool_calling_for("") if not args.tool_calling else args.tool_calling,
               "tools": config.tool_style}
        if config.profile == "guided":
            text = out["tool calling"] == "text"
            deviations.append("profile guided (tools judge reach and ambiguity, a checklist in the Ask step, no common "
                              "sense, one " + ("'Tool call:'" if text else "native call") + " per turn, a final response beside a call "
                              "not warned"
                              + (", a worked example" if config.examples and text else "") + ")")
        elif config.examples:
            deviations.append("examples (ignored by the paper profile)")
        if config.max_turns:
            deviations.append(f"a turn limit of {config.max_turns} (the paper ends a check at its time limit only)")
    if args.stand_in:
        out["model"] = f"stand-in, slip {args.stand_in_slip:g}, seed {args.seed}"
    if args.recovery:
        out["recovery context"] = args.recovery_context  # the paper's Table 2 rows; 'explanation' is its prompt
        if args.recovery_stand_in:
            out["recovery planner"] = "stand-in (reads its prompt)"
    out["deviations"] = deviations
    return out
