#!/usr/bin/env python3
"""Issue detection (RAIDER, issue 12): tool latency, a whole check without the model, the precond baseline.

In the benchmark's own worlds (config/benchmarks/raider/, loaded by CaseWorlds: PyBullet, no ROS):

  tool latency     each of the six grounded tools, over every household case's scene  goal: median <= 20 ms
  whole check      RaiderAgent (the paper profile) on each case with the zero-latency stand-in of `teachbot eval raider
                   --stand-in`, which follows the procedure in its prompt: everything but the model  goal: median <= 100 ms
  precond          the predefined-preconditions baseline's (the paper's Table B.3) Det and Expl on all cases (no model)

Usage: python bench/issue_detection.py [--runs 3] [--smoke]
"""

from __future__ import annotations

import json
import time

import _common as C

C.ensure_importable()

GOAL_TOOL_S = 0.020
GOAL_CHECK_S = 0.100


def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=3, smoke={"runs": 1})
    args = p.parse_args()
    machine = C.machine()

    from teachbot.evaluation.raider_benchmark import checker_factory, run_cases
    from teachbot.evaluation.raider_cases import CaseWorlds, load_cases
    from teachbot.evaluation.raider_report import summarise
    from teachbot.evaluation.raider_standin import RaiderStandIn
    from teachbot.raider.agent import RaiderAgent
    from teachbot.raider.config import RaiderConfig

    cases = load_cases()
    config = RaiderConfig.load()
    tool_times: dict[str, list[float]] = {}
    checks: list[float] = []
    with CaseWorlds() as worlds:
        for case in cases:
            tools = worlds.tools_for(case)
            names = json.loads(tools.object_detection())["objects"]
            target = names[0]
            calls = {"robot_holding": [], "object_detection": [], "dist_to_target": [target], "get_obj_state": [target],
                     "check_obj_relationship": ["on top of", target], "get_obj_properties": [target]}
            for _ in range(args.runs):
                for tool, tool_args in calls.items():
                    t0 = time.perf_counter()
                    tools.call(tool, tool_args)
                    tool_times.setdefault(tool, []).append(time.perf_counter() - t0)
                agent = RaiderAgent(RaiderStandIn().model(), tools, case.world, config, reach=tools.reach)
                t0 = time.perf_counter()
                result = agent.check(case.query)
                checks.append(time.perf_counter() - t0)
                if not result.final_response:
                    raise SystemExit(f"error: the stand-in reached no verdict on {case.id}: {result.explanation}")
    per_tool = {tool: C.summary([t * 1e3 for t in times], 3) for tool, times in tool_times.items()}
    worst = max(s["median"] for s in per_tool.values()) / 1e3
    check = C.summary(checks, 4)
    t0 = time.perf_counter()
    precond = summarise(run_cases(cases, checker_factory("precond")))["overall"]
    precond_s = time.perf_counter() - t0
    for tool, s in per_tool.items():
        C.say(f"  {tool:24s} median {s['median']:7.3f} ms  max {s['max']:7.3f} ms")
    C.say(f"slowest tool median {worst * 1e3:.3f} ms; goal <= {GOAL_TOOL_S * 1e3:g} ms: {'met' if worst <= GOAL_TOOL_S else 'MISSED'}")
    C.say(f"whole check without the model: median {check['median'] * 1e3:.1f} ms ({len(checks)} checks); goal <= "
          f"{GOAL_CHECK_S * 1e3:g} ms: {'met' if check['median'] <= GOAL_CHECK_S else 'MISSED'}")
    C.say(f"precond (Table B.3), {precond['n']} cases: Det {precond['det']:.1f} %, Expl {precond['expl']:.1f} %, "
          f"Grnd {precond['grnd']:.1f} % ({precond_s:.1f} s with the worlds)")
    C.emit({
        "benchmark": "issue_detection", "unit": "s", "runs": args.runs, "headline": "check_s", "median": check["median"],
        **C.goal_fields(check["median"], GOAL_CHECK_S, lower_is_better=True),
        "check_s": check, "tool_ms": per_tool, "slowest_tool_median_s": round(worst, 6), "tool_goal_s": GOAL_TOOL_S,
        "tool_ratio_to_goal": round(worst / GOAL_TOOL_S, 4), "tool_meets_goal": worst <= GOAL_TOOL_S,
        "precond": {"cases": precond["n"], "det": round(precond["det"], 2), "expl": round(precond["expl"], 2),
                    "grnd": round(precond["grnd"], 2)},
        "machine": machine,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
