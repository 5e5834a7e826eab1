#!/usr/bin/env python3
"""Pick-and-place wall time in the headless simulator (physics as fast as possible, camera off).

For seeds 0..runs-1: reset the scene, take the first block and the first bowl from the reset
response, time ``put_first_on_second`` (send goal -> result), and check the result and that the
world state shows the block supported by the bowl. Two configurations:

  in_process          sim + skills + client composed in one process (InProcessStack)
  separate_processes  sim and skills as two child processes (as ``ros2 launch`` runs them),
                      the client in this process

Goal: median under 2 s (medians are over successful runs; meets_goal also needs every run to succeed).
After each reset the benchmark waits, untimed, until the new object list is on sim/objects (see
--no-sync): the reset service answers before the skills node has heard of the new scene.

Usage: python bench/pick_place.py [--runs 10] [--only in_process|separate_processes] [--no-sync] [--switch-interval S] [--smoke]
"""

from __future__ import annotations

import sys
import time

import _common as C

C.setup()

GOAL_S = 2.0
READY_TIMEOUT = 120.0  # a guard against a hang, not a goal: a loaded machine may take long to start nodes
SIM_PARAMS = {"real_time_factor": 0.0, "camera_enabled": False}
SYNC_MARGIN = 0.05  # s after the client sees the new object list, for the skills node to see it too


def first_block_and_bowl(objects) -> tuple[str, str]:
    names = [o.name for o in objects]
    block = next(n for n in names if n.endswith(" block"))
    bowl = next(n for n in names if n.endswith(" bowl"))
    return block, bowl


class ObjectListWatch:
    """Latest sim/objects list seen by the client node: the skills node reads the same topic."""

    def __init__(self, node) -> None:
        import threading

        from teachbot_interfaces.msg import ObjectList

        from teachbot.nodes.common import LATCHED_QOS
        from teachbot.robot_profile import RobotProfile

        self._cond = threading.Condition()
        self._latest: dict[str, tuple[float, float]] = {}
        topic = RobotProfile.load("panda_sim").topics["objects"]
        self.sub = node.create_subscription(ObjectList, topic, self._on_objects, LATCHED_QOS)

    def _on_objects(self, msg) -> None:
        with self._cond:
            self._latest = {o.name: (o.pose.position.x, o.pose.position.y) for o in msg.objects}
            self._cond.notify_all()

    def wait_for(self, objects, timeout: float = 5.0) -> bool:
        """Until the list matches ``objects`` (names and x, y within 1 cm): the post-reset scene."""
        want = {o.name: (o.pose.position.x, o.pose.position.y) for o in objects}

        def fresh() -> bool:
            return self._latest.keys() == want.keys() and all(
                abs(self._latest[n][0] - x) < 0.01 and abs(self._latest[n][1] - y) < 0.01 for n, (x, y) in want.items())

        with self._cond:
            return self._cond.wait_for(fresh, timeout)


def run_seeds(client, runs: int, label: str, sync: bool = True) -> dict:
    times, all_times, sim_times, successes, failures = [], [], [], 0, []
    watch = ObjectListWatch(client.node) if sync else None
    for seed in range(runs):
        reset = client.reset(seed=seed)
        if not reset.success:
            failures.append(f"seed {seed}: reset failed: {reset.message}")
            continue
        block, bowl = first_block_and_bowl(reset.objects)
        if watch is not None:
            # The reset service answers before the skills node has the new object list (it arrives
            # on the sim/objects topic); a goal sent at once can name objects the skills do not
            # know yet. Wait (untimed) until the new list is on the topic, plus a margin.
            if not watch.wait_for(reset.objects):
                C.say(f"  [{label}] seed {seed}: no post-reset object list within 5 s")
            time.sleep(SYNC_MARGIN)
        sim0 = client.world_state().sim_time  # physics runs on while idle: the delta is the skill's simulated time
        elapsed, result = C.timed(lambda b=block, w=bowl: client.call("put_first_on_second", object_name=b, target_name=w))
        state = client.world_state()
        sim_s = state.sim_time - sim0
        support = next((o.supported_by for o in state.objects if o.name == block), "?")
        ok = bool(result.success) and support == bowl
        successes += ok
        all_times.append(elapsed)
        if ok:
            times.append(elapsed)
            sim_times.append(sim_s)
        if not ok:
            failures.append(f"seed {seed}: success={result.success} code={result.code} "
                            f"message={result.message!r} {block} supported_by={support!r}")
        C.say(f"  [{label}] seed {seed}: {block} -> {bowl}: {elapsed:.3f} s "
              f"(skill says {result.duration:.3f} s; {sim_s:.2f} s simulated, {sim_s / elapsed:.1f}x real time) "
              f"{'ok' if ok else 'FAILED'}")
    stats = C.summary(times)  # successful runs only: a failure's time is not a pick-and-place time
    if watch is not None:
        client.node.destroy_subscription(watch.sub)
    if sim_times:  # wall time = simulated duration of the motion / speed of the physics
        stats["sim_s_median"] = round(C.statistics.median(sim_times), 3)
        stats["real_time_factor_median"] = round(C.statistics.median(a / b for a, b in zip(sim_times, times)), 2)
    return {**stats, "unit": "s", "successes": successes, "attempts": runs,
            "median_all_attempts": round(C.statistics.median(all_times), 4) if all_times else None, "failures": failures}


def in_process(runs: int, sync: bool) -> dict:
    from teachbot.nodes.stack import InProcessStack

    C.say("in_process: InProcessStack(real_time_factor=0.0, camera_enabled=False)")
    stack = InProcessStack(real_time_factor=0.0, camera_enabled=False)
    try:
        start_s, client = C.timed(lambda: stack.start(wait=READY_TIMEOUT))
        C.say(f"  ready after {start_s:.2f} s")
        return run_seeds(client, runs, "in_process", sync)
    finally:
        C.stop_stack(stack)


def separate_processes(runs: int, sync: bool) -> dict:
    C.say("separate_processes: sim and skills as child processes, client here")
    session = None
    procs = []
    try:
        procs.append(C.spawn_node(C.SIM_MODULE, SIM_PARAMS))
        procs.append(C.spawn_node(C.SKILLS_MODULE))
        t0 = time.perf_counter()
        session = C.ClientSession("bench_pick_place")
        try:
            session.client.wait_ready(READY_TIMEOUT)
        except Exception:
            C.check_alive(*procs)
            raise
        C.say(f"  ready after {time.perf_counter() - t0:.2f} s")
        C.check_alive(*procs)
        return run_seeds(session.client, runs, "separate_processes", sync)
    finally:
        if session is not None:
            session.close()
        for proc in procs:
            C.stop(proc)


def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=10, smoke={"runs": 1})
    p.add_argument("--only", choices=("in_process", "separate_processes"))
    p.add_argument("--no-sync", action="store_true",
                   help="send the goal as soon as reset answers (shows the stale-object-list race)")
    p.add_argument("--switch-interval", type=float, default=0.0,
                   help="sys.setswitchinterval() for this process (in_process form), e.g. 0.001; default: Python's 5 ms")
    args = p.parse_args()
    if args.switch_interval > 0:
        sys.setswitchinterval(args.switch_interval)
    machine = C.machine()
    configs: dict[str, dict] = {}
    try:
        for name, fn in (("in_process", in_process), ("separate_processes", separate_processes)):
            if args.only and args.only != name:
                continue
            if configs:  # a fresh ROS domain: nothing left from the previous configuration is discovered
                C.fresh_domain()
            try:
                configs[name] = fn(args.runs, not args.no_sync)
            except Exception as exc:  # noqa: BLE001 - report the other configuration anyway
                C.say(f"  [{name}] ERROR: {type(exc).__name__}: {exc}")
                configs[name] = {"error": f"{type(exc).__name__}: {exc}", "median": None}
    finally:
        C.stop_all()
        C.remove_logs()

    # ros2 launch (separate processes) is the deployment form where it is installed; otherwise the
    # nodes are composed in one process (InProcessStack, the CLI), as in this environment.
    headline = "separate_processes" if C.ros_launch_available() else "in_process"
    if headline not in configs:
        headline = next(iter(configs))
    C.say("")
    for name, r in configs.items():
        if r.get("median") is not None:
            C.say(f"{name:>20}: median {r['median']:.3f} s  min {r['min']:.3f}  max {r['max']:.3f}  "
                  f"success {r['successes']}/{r['attempts']}  ({r['sim_s_median']:.2f} s simulated at "
                  f"{r['real_time_factor_median']:.1f}x real time; goal < {GOAL_S} s: "
                  f"{'met' if r['median'] < GOAL_S else 'MISSED'})")
        else:
            C.say(f"{name:>20}: {r.get('error', 'no data')}")
    why = "ros2 launch available" if C.ros_launch_available() else "ros2 launch not installed: nodes run composed"
    C.say(f"headline: {headline} ({why})")
    value = configs[headline].get("median")
    all_ok = all(r.get("successes") == r.get("attempts") for r in configs.values())
    goal = C.goal_fields(value, GOAL_S)
    goal["meets_goal"] = goal["meets_goal"] and configs[headline].get("successes") == configs[headline].get("attempts")
    C.emit({
        "benchmark": "pick_place", "unit": "s", "runs": args.runs, "headline": headline,
        "median": value, **goal, "object_list_sync": not args.no_sync, "switch_interval_s": sys.getswitchinterval(),
        "all_succeeded": all_ok,
        "in_process_median": configs.get("in_process", {}).get("median"),
        "separate_processes_median": configs.get("separate_processes", {}).get("median"),
        "configs": {k: {kk: vv for kk, vv in v.items() if kk != "failures" or vv} for k, v in configs.items()},
        "machine": machine,
    })
    return 0 if all_ok and value is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
