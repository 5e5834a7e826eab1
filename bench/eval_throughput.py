#!/usr/bin/env python3
"""Evaluation throughput: the SA-SI protocol with a zero-latency oracle stand-in, with 1 and 2 workers.

The oracle types each task's expert statements, so what is timed is the harness itself: scene reset,
the console (prompt, retrieval, sandbox), the robot's motions at real_time_factor 0, the checks and the
simulated person. Runs per minute for the whole sweep (start-up included) and the median wall time of
one run (everything but the model). With 2 workers the sweep runs two methods (ours, ours-k4), one per
worker, so each worker does the 80 runs of SA-SI; with 1 worker one method does them.

Goals on the 2-core machine: the whole SA-SI protocol (80 runs) in at most 10 minutes; the median run
at most 5 s.

Usage: python bench/eval_throughput.py [--runs 10] [--workers 1,2] [--templates N] [--smoke]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import _common as C

C.setup()

GOAL_PROTOCOL_S = 600.0
GOAL_RUN_S = 5.0


def sweep(workers: int, runs: int, templates: int, out: Path) -> dict[str, float]:
    from teachbot.commands.eval import CliModels
    from teachbot.evaluation.metrics import read_results
    from teachbot.evaluation.sweep import SweepConfig
    from teachbot.nodes.eval_sweep import run_sweep

    methods = ("ours", "ours-k4")[:workers]
    config = SweepConfig(methods=methods, splits=("SA-SI",), runs=runs, templates=templates, seed=7, llm={"stand_in": "oracle"})
    start = time.monotonic()
    run_sweep(config, out, CliModels({}, "oracle"), workers=workers, show_progress=False)
    elapsed = time.monotonic() - start
    records = read_results(out / "results.jsonl")
    per_run = [r.wall_s for r in records]
    success = sum(r.outcome == "success" for r in records)
    C.say(f"{workers} worker(s): {len(records)} runs in {elapsed:.0f} s ({len(records) / elapsed * 60:.1f} runs/min), "
          f"median run {statistics.median(per_run):.2f} s, {success}/{len(records)} successes")
    return {"runs": len(records), "seconds": round(elapsed, 1), "runs_per_min": round(len(records) / elapsed * 60, 2),
            "median_run_s": round(statistics.median(per_run), 3), "p90_run_s": round(sorted(per_run)[int(0.9 * len(per_run))], 3),
            "successes": success, "protocol_s": round(elapsed / len(methods), 1)}


def main() -> None:
    parser = C.parser(__doc__.split("\n\n")[0], runs=None, smoke={"runs": 1, "workers": "1", "templates": 1})
    parser.add_argument("--runs", type=int, default=10, help="runs per template (the protocol: 10)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--templates", type=int, default=0, help="the first N templates of SA-SI only (default 0: all)")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="teachbot-eval-bench-") as tmp:
        for workers in (int(w) for w in args.workers.split(",")):
            results[f"workers_{workers}"] = sweep(workers, args.runs, args.templates, Path(tmp) / f"w{workers}")
    one = results.get("workers_1") or next(iter(results.values()))
    C.emit({
        "benchmark": "eval_throughput", "unit": "s", "runs_per_template": args.runs, "templates": args.templates or "all", **results,
        "median": one["median_run_s"], "goal_median_run_s": GOAL_RUN_S, "ratio_run": round(one["median_run_s"] / GOAL_RUN_S, 3),
        "protocol_s": one["protocol_s"], "goal_protocol_s": GOAL_PROTOCOL_S,
        "ratio_protocol": round(one["protocol_s"] / GOAL_PROTOCOL_S, 3),
        "meets_goal": one["median_run_s"] <= GOAL_RUN_S and one["protocol_s"] <= GOAL_PROTOCOL_S,
        "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
