#!/usr/bin/env python3
"""Round-trip time of the no-op skill: ``wait`` with duration 0, send goal -> result.

--runs calls (default 200) after 10 warm-up calls, in two configurations:

  in_process          client and skills node in one process: InProcessStack(sim=False)
                      (one MultiThreadedExecutor, 6 threads, for both nodes)
  separate_processes  skills node in a child process (its own main(): MultiThreadedExecutor, 4 threads),
                      client in this process spun like SkillClient.spin_in_background()

In both the arm is the sim node in a child process, as a robot's driver runs beside the stack (real time, the
arm at rest, camera off): every skill, the no-op wait too, reads the arm's joint states before it runs.

Each call is split in two phases: accept (send_goal_async -> goal accepted, what SkillClient.send
waits for) and result (get_result_async -> result). ``cpu_ms_per_call`` is this process's CPU time
per call: close to the wall time means the round trip is bound by Python work, not by waiting.

--diagnose adds variants, each in a fresh child process (a fresh DDS participant, no stale graph),
to locate the cost: the same nodes on a SingleThreadedExecutor, a bare rclpy action server with
one action (no teachbot code) on each executor kind, and the separate-process form with the client
on a SingleThreadedExecutor, and ActionServer(result_timeout=1 s) instead of rclpy's 10 s (finished
goals stay in the status array that every goal transition publishes and the client parses, so the
round trip grows with the number of goals in the last 10 s; compare first/last medians).
Single-threaded skills are a floor here, not a drop-in fix: a real skill's execute callback
blocks for seconds and would starve the joint-state subscription.

Goal: median under 5 ms.   Usage: python bench/action_overhead.py [--runs 200] [--diagnose] [--smoke]
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import _common as C

C.setup()

GOAL_MS = 5.0
WARMUP = 10
READY_TIMEOUT = 120.0  # a guard against a hang, not a goal: a loaded machine may take long to start nodes


# ------------------------------------------------------------------ measurement
def measure(send, runs: int) -> dict:
    """``send()`` -> (wait for acceptance) returns ``result_fn``; ``result_fn()`` waits for the result."""
    for _ in range(WARMUP):
        send()()
    accept, result, total = [], [], []
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        get_result = send()
        t1 = time.perf_counter()
        ok = get_result()
        t2 = time.perf_counter()
        if not ok:
            raise RuntimeError("wait skill did not succeed")
        accept.append((t1 - t0) * 1e3)
        result.append((t2 - t1) * 1e3)
        total.append((t2 - t0) * 1e3)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    k = max(1, min(50, runs // 4))
    return {**C.summary(total, 3), "unit": "ms", "accept_ms_median": round(C.statistics.median(accept), 3),
            f"first{k}_median": round(C.statistics.median(total[:k]), 3),
            f"last{k}_median": round(C.statistics.median(total[-k:]), 3),
            "result_ms_median": round(C.statistics.median(result), 3),
            "cpu_ms_per_call": round(cpu / runs * 1e3, 3), "wall_ms_per_call": round(wall / runs * 1e3, 3)}


def skill_client_send(client):
    def send():
        handle = client.send("wait", duration=0.0)
        return lambda: handle.result(5.0).success
    return send


def action_client_send(action_client, goal_type):
    from teachbot.nodes.skill_client import _wait_future  # the same wait SkillClient uses

    def send():
        handle = _wait_future(action_client.send_goal_async(goal_type(duration=0.0)), 5.0, "goal")
        return lambda: _wait_future(handle.get_result_async(), 5.0, "result") is not None
    return send


# ------------------------------------------------------------------ the two configurations
def in_process(runs: int) -> dict:
    from teachbot.nodes.stack import InProcessStack

    arm = C.spawn_arm()
    stack = InProcessStack(sim=False)
    try:
        try:
            client = stack.start(wait=READY_TIMEOUT)
            C.wait_for_arm(client, READY_TIMEOUT)
        except Exception:
            C.check_alive(arm)
            raise
        return measure(skill_client_send(client), runs)
    finally:
        C.stop_stack(stack)
        C.stop(arm)


def separate_processes(runs: int, client_executor: str = "multi") -> dict:
    arm = C.spawn_arm()
    skills = C.spawn_node(C.SKILLS_MODULE)
    session = None
    try:
        session = C.ClientSession("bench_action_overhead", executor=client_executor)
        try:
            C.wait_for_arm(session.client, READY_TIMEOUT)
        except Exception:
            C.check_alive(skills, arm)
            raise
        return measure(skill_client_send(session.client), runs)
    finally:
        if session is not None:
            session.close()
        C.stop(skills)
        C.stop(arm)


# ------------------------------------------------------------------ diagnostic variants (child processes)
def composed(runs: int, executor: str, server: str, result_timeout: float | None = None) -> dict:
    """Server and client nodes on one executor built here: executor 'single' or 'multiN'.

    ``result_timeout`` overrides rclpy's ActionServer default (10 s: every finished goal stays in the
    goal status array, published and parsed on each state change, for that long)."""
    import rclpy
    from rclpy.action import ActionServer
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    from teachbot_interfaces.action import Wait

    from teachbot.nodes.action_client import ActionClient
    from teachbot.nodes.skill_client import SkillClient
    from teachbot.nodes.skills_node import SkillsNode

    if result_timeout is not None:
        import rclpy.action.server as action_server

        init = action_server.ActionServer.__init__

        def patched(self, *args, **kwargs):  # this child process only; src/ is untouched
            kwargs.setdefault("result_timeout", result_timeout)
            init(self, *args, **kwargs)
        action_server.ActionServer.__init__ = patched
    rclpy.init()
    if server == "teachbot":
        C.spawn_arm()  # stopped by the variant's C.stop_all()
        server_node = SkillsNode("panda_sim")
    else:  # one bare action server, nothing else: the rclpy floor
        server_node = rclpy.create_node("bare_server")

        def execute(goal_handle):
            goal_handle.succeed()
            return Wait.Result()
        ActionServer(server_node, Wait, "skills/wait", execute)
    client_node = rclpy.create_node("bench_client")
    if server == "teachbot":
        client = SkillClient(client_node)
        send, ready = skill_client_send(client), lambda: C.wait_for_arm(client, READY_TIMEOUT)
    else:
        action_client = ActionClient(client_node, Wait, "skills/wait")
        send, ready = action_client_send(action_client, Wait.Goal), lambda: action_client.wait_for_server(READY_TIMEOUT)
    ex = SingleThreadedExecutor() if executor == "single" else MultiThreadedExecutor(num_threads=int(executor[5:]))
    ex.add_node(server_node)
    ex.add_node(client_node)
    thread = threading.Thread(target=ex.spin, daemon=True)
    thread.start()
    try:
        ready()
        return measure(send, runs)
    finally:
        ex.shutdown(timeout_sec=2.0)
        thread.join(timeout=2.0)
        client_node.destroy_node()
        server_node.destroy_node()
        rclpy.shutdown()


VARIANTS = {
    "in_process_multi6": ("teachbot nodes, one MultiThreadedExecutor(6) (as InProcessStack)", lambda n: composed(n, "multi6", "teachbot")),
    "in_process_multi6_rt1": ("as in_process_multi6, ActionServer result_timeout 1 s instead of 10 s",
                              lambda n: composed(n, "multi6", "teachbot", result_timeout=1)),
    "in_process_single": ("teachbot nodes, one SingleThreadedExecutor", lambda n: composed(n, "single", "teachbot")),
    "bare_rclpy_multi6": ("one bare rclpy action server + client, MultiThreadedExecutor(6)", lambda n: composed(n, "multi6", "bare")),
    "bare_rclpy_single": ("one bare rclpy action server + client, SingleThreadedExecutor", lambda n: composed(n, "single", "bare")),
    "separate_client_single": ("skills child process, client on a SingleThreadedExecutor", lambda n: separate_processes(n, "single")),
}


def run_variant_child(name: str, runs: int) -> dict:
    cmd = [sys.executable, __file__, "--variant", name, "--runs", str(runs)]
    proc = C.spawn(cmd, f"variant-{name}")
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        C.stop(proc)
        return {"error": "timed out", "median": None}
    finally:
        C.stop(proc)
    text = Path(proc.log).read_text(errors="replace")  # type: ignore[attr-defined]
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: {C.log_tail(proc, 5)}", "median": None}
    return json.loads(lines[-1])


# ------------------------------------------------------------------ main
def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=200, smoke={"runs": 10})
    p.add_argument("--diagnose", action="store_true", help="also run the diagnostic variants")
    p.add_argument("--variant", choices=sorted(VARIANTS), help=C.argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:  # child of --diagnose: one variant, one JSON line
        try:
            result = VARIANTS[args.variant][1](args.runs)
        finally:
            C.stop_all()
            C.remove_logs()
        C.emit(result)
        return 0

    machine = C.machine()
    configs: dict[str, dict] = {}
    try:
        for name, fn in (("in_process", in_process), ("separate_processes", separate_processes)):
            C.say(f"{name}: {WARMUP} warm-up + {args.runs} calls of wait(duration=0) ...")
            if configs:  # a fresh ROS domain: nothing left from the previous configuration is discovered
                C.fresh_domain()
            try:
                configs[name] = r = fn(args.runs)
                fl = [v for key, v in r.items() if key.startswith(("first", "last"))]
                C.say(f"  median {r['median']:.2f} ms (accept {r['accept_ms_median']:.2f} + result "
                      f"{r['result_ms_median']:.2f}), min {r['min']:.2f}, p90 {r['p90']:.2f}, max {r['max']:.2f}; "
                      f"first/last quarter median {fl[0]:.2f}/{fl[1]:.2f} ms; "
                      f"CPU in this process {r['cpu_ms_per_call']:.2f} ms per call of {r['wall_ms_per_call']:.2f} ms wall")
            except Exception as exc:  # noqa: BLE001
                C.say(f"  ERROR: {type(exc).__name__}: {exc}")
                configs[name] = {"error": f"{type(exc).__name__}: {exc}", "median": None}
        diagnostics: dict[str, dict] = {}
        if args.diagnose:
            C.say("diagnostic variants (each in a fresh child process):")
            for name, (what, _) in VARIANTS.items():
                diagnostics[name] = r = run_variant_child(name, args.runs)
                if r.get("median") is not None:
                    fl = [v for key, v in r.items() if key.startswith(("first", "last"))]
                    C.say(f"  {name:24s} median {r['median']:6.2f} ms (accept {r['accept_ms_median']:.2f} + "
                          f"result {r['result_ms_median']:.2f}, first/last {fl[0]:.2f}/{fl[1]:.2f}), "
                          f"CPU {r['cpu_ms_per_call']:.2f} ms/call  -- {what}")
                else:
                    C.say(f"  {name:24s} {r.get('error')}")
    finally:
        C.stop_all()
        C.remove_logs()

    headline = "separate_processes" if C.ros_launch_available() else "in_process"
    value = configs[headline].get("median")
    C.say("")
    for name, r in configs.items():
        if r.get("median") is not None:
            C.say(f"{name:>20}: median {r['median']:.2f} ms  (goal < {GOAL_MS} ms: {'met' if r['median'] < GOAL_MS else 'MISSED'})")
    C.say(f"headline: {headline}")
    C.emit({
        "benchmark": "action_overhead", "unit": "ms", "runs": args.runs, "warmup": WARMUP, "headline": headline,
        "median": value, **C.goal_fields(value, GOAL_MS),
        "in_process_median": configs.get("in_process", {}).get("median"),
        "separate_processes_median": configs.get("separate_processes", {}).get("median"),
        "configs": configs, **({"diagnostics": diagnostics} if diagnostics else {}),
        "machine": machine,
    })
    return 0 if value is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
