"""Time from ``kill -9`` of a node to the console's error line (issue 15 benchmark; goal: at most 2 s).

The sim, skills, perception, memory and improvement nodes run under teachbot.nodes.supervisor (``teachbot sim
--processes``); the interaction manager with a scripted model runs here and asks for put_first_on_second each
round. One second into the skill the node is killed; the figure is the time until the console's transcript shows
the error line (a vanished skills node is noticed by the skill call, a vanished sim by the skills node, the others
by the interaction manager's stack watchdog). Each kill gets a fresh stack. The scenario is the one of
test/faults/test_node_kill.py.

    python bench/fault_recovery.py [--runs 3] [--nodes skills,sim,perception,memory,improvement] [--stack NODES] [--smoke]

--stack names the nodes the supervisor runs (default all five; each killed node must be among them); the tiny
mode kills the skills node once in a stack of the sim and skills nodes only.
"""

from __future__ import annotations

import statistics
import sys

import _common as C

GOAL_S = 2.0
NODES = ("skills", "sim", "perception", "memory", "improvement")


def main() -> int:
    """Kill each node ``--runs`` times mid-skill and print the medians, then one JSON line."""
    parser = C.parser(__doc__.splitlines()[0], runs=3, smoke={"runs": 1, "nodes": "skills", "stack": "sim,skills"})
    parser.add_argument("--nodes", default=",".join(NODES), help=f"comma-separated nodes to kill (default {','.join(NODES)})")
    parser.add_argument("--stack", default=",".join(NODES), help="comma-separated nodes the supervisor runs (default all five)")
    args = parser.parse_args()
    C.setup()
    # the scenario lives in the test suite, with the suite's timing helpers (test/timing.py) beside it
    sys.path[:0] = [str(C.REPO / "test" / "faults"), str(C.REPO / "test")]
    import test_node_kill as K  # the scenario's stack and steps

    nodes = [n for n in args.nodes.split(",") if n]
    stacked = tuple(n for n in NODES if n in args.stack.split(","))
    if set(nodes) - set(NODES):
        parser.error(f"unknown node(s) {', '.join(sorted(set(nodes) - set(NODES)))}; nodes: {', '.join(NODES)}")
    if set(nodes) - set(stacked) or set(args.stack.split(",")) - set(NODES):
        parser.error(f"--stack {args.stack} must name known nodes, every one of --nodes {args.nodes} among them")
    times: dict[str, list[float]] = {n: [] for n in nodes}
    errors: dict[str, str] = {}
    for victim in nodes:
        for run in range(args.runs):
            stack = K.Stack(requests=1, nodes=stacked)  # a fresh stack per kill: every round starts from the same state
            try:  # the console's session starts after the stack is up: the smaller the stack, the later
                K.wait_until(lambda s=stack: s.node.session is not None, 60.0, "the console's session")
                elapsed, line, _ = K.kill_mid_skill(stack, victim, "put the red block in the blue bowl")
            finally:
                stack.close()
            times[victim].append(elapsed)
            errors[victim] = line
            C.say(f"kill -9 {victim} #{run + 1}: error line after {elapsed:.2f} s: {line[:100]}")
    medians = {n: statistics.median(t) for n, t in times.items()}
    worst = max(medians.values())
    for name, value in medians.items():
        C.say(f"{name:>8}: median {value:.2f} s, max {max(times[name]):.2f} s "
              f"(goal <= {GOAL_S} s: {'met' if value <= GOAL_S else 'MISSED'})")
    C.emit({
        "benchmark": "fault_recovery", "unit": "s", "runs": args.runs, "stack": list(stacked), "median": worst,
        **C.goal_fields(worst, GOAL_S),
        "nodes": {n: {"median": round(medians[n], 3), "max": round(max(times[n]), 3), **C.goal_fields(medians[n], GOAL_S),
                      "times": [round(t, 3) for t in times[n]], "error_line": errors[n]} for n in nodes},
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
