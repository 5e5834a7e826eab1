"""A node started twice (issue 15, item 4).

Two processes start the skills node at the same instant (both have imported everything and wait for one
"go" line on stdin): exactly one runs, the other exits with status 2 and one error line naming the
process that runs it. Once the running one has died of kill -9 a fresh one starts at once: the kernel released its
name lock. The processes run on a ROS domain of their own (see test_node_kill.py). In one process a node
name is free again once its node is destroyed (or its context shut down), and taken while it lives.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROUNDS = 3  # make test: three races; make test-slow repeats the same race ten times
SLOW_ROUNDS = 10
START = 60.0  # seconds a node process may take to import, start or exit on a loaded machine
ERROR = re.compile(r"error: a node named /skills is already running in ROS_DOMAIN_ID=(\d+) on this machine "
                   r"\(process (\d+)\); stop it or start this one under another name \(--ros-args -r __node:=skills_2\)")
READY = "skills ready for"


@pytest.mark.parametrize("rounds", [ROUNDS, pytest.param(SLOW_ROUNDS, marks=pytest.mark.slow)])
def test_two_at_once_one_runs_the_other_exits_2_and_after_kill_9_a_new_one_starts(rounds):
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # a domain of its own: not the session stack's
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-u", __file__, "scenario", str(rounds)], env=env, capture_output=True,
                         text=True, timeout=rounds * 4 * START)
    report = [line for line in run.stdout.splitlines() if line.startswith("round ")]
    print("\n".join(report))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-6000:]
    assert len(report) == rounds, run.stdout[-4000:]


def test_in_one_process_a_destroyed_nodes_name_is_free_and_a_living_ones_is_refused(ros_context):
    from teachbot.nodes.common import DuplicateNodeError
    from teachbot.nodes.skills_node import SkillsNode

    first = SkillsNode(namespace="/dup_inproc")  # not /skills: the session stack may run one in this domain
    try:
        with pytest.raises(DuplicateNodeError, match=r"a node named /dup_inproc/skills is already running in "
                                                     r"ROS_DOMAIN_ID=\d+ on this machine \(this process\); stop it"):
            SkillsNode(namespace="/dup_inproc")
    finally:
        first.close()
        first.destroy_node()
    for _ in range(3):  # as a benchmark builds stack after stack in one process
        again = SkillsNode(namespace="/dup_inproc")
        again.close()
        again.destroy_node()
        again.destroy_node()  # destroying twice (a stack's error path, then its stop) releases once, harmlessly


def test_shutting_down_a_context_frees_the_names_of_its_nodes_and_a_refused_node_leaves_the_graph(ros_context):
    """rclpy.shutdown() destroys the nodes a program left alive; their names must be free afterwards. A refused
    node's constructor never returns, so refuse_duplicate takes it off the graph itself."""
    import rclpy
    from rclpy.context import Context

    from teachbot.nodes.common import DuplicateNodeError, refuse_duplicate

    for _ in range(2):
        context = Context()
        rclpy.init(context=context)
        node = rclpy.create_node("dup_context", context=context)
        refuse_duplicate(node, wait=0.0)
        other = rclpy.create_node("dup_context", context=context)
        with pytest.raises(DuplicateNodeError, match="this process"):
            refuse_duplicate(other, wait=0.0)
        names = [n for n, _ in node.get_node_names_and_namespaces()]
        assert names.count("dup_context") == 1, names
        context.shutdown()  # destroys `node` through destroy_node(), which lets go of its name


def test_a_namesake_on_the_graph_without_the_lock_is_refused_if_it_stays_and_let_be_if_it_leaves(ros_context):
    """The graph half of the check, for a node on another machine (here: one that takes no lock): refused once
    it has stayed GRAPH_GRACE s; one that leaves within it (a loser of the lock, exiting) is no duplicate."""
    import rclpy

    from teachbot.nodes.common import GRAPH_GRACE, DuplicateNodeError, refuse_duplicate

    elsewhere = rclpy.create_node("dup_graph")
    try:
        started = time.monotonic()
        with pytest.raises(DuplicateNodeError, match=r"/dup_graph is already running in ROS_DOMAIN_ID=\d+ elsewhere"):
            refuse_duplicate(rclpy.create_node("dup_graph"), wait=0.2)
        assert time.monotonic() - started >= GRAPH_GRACE
    finally:
        elsewhere.destroy_node()
    leaving = rclpy.create_node("dup_graph")
    node = rclpy.create_node("dup_graph")
    timer = threading.Timer(0.5, leaving.destroy_node)
    timer.start()
    try:
        refuse_duplicate(node, wait=0.2)
    finally:
        timer.join()
        node.destroy_node()


def test_the_lock_file_names_the_domain_and_the_full_name():
    from teachbot.nodes.common import NodeNameLock
    from teachbot.ros_env import reserve_domain_id

    domain = reserve_domain_id()  # held by this process: no other test run uses its locks
    lock = NodeNameLock(domain, "/robot_1/sim")
    try:
        assert lock.path.name == f"domain{domain}.robot_1.sim.lock"
        assert lock.acquire()
        assert lock.holder() == "this process"
        rival = NodeNameLock(domain, "/robot_1/sim")
        assert not rival.acquire()
        rival.release()
        other = NodeNameLock(domain, "/robot_2/sim")
        assert other.acquire()
        other.release()
    finally:
        lock.release()
    again = NodeNameLock(domain, "/robot_1/sim")
    assert again.acquire()
    again.release()


# ---------------------------------------------------------------------------------------------- child processes
class Contender:
    """A skills node process that has imported everything and starts when told to."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-u", __file__, "node"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def has(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)


def wait_until(predicate, timeout: float, what: str, *procs: Contender) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}: "
                                 + " | ".join(f"pid {p.proc.pid} rc={p.proc.poll()}: {p.lines[-5:]}" for p in procs))
        time.sleep(0.01)


def one_round(number: int, domain: int) -> str:
    """Two at once, then kill -9 of the winner and a third at once; the report line of the round."""
    env = dict(os.environ)
    procs = [Contender(env) for _ in range(3)]
    try:
        a, b, c = procs
        wait_until(lambda: all(p.has("waiting for go") for p in procs), START, "three imported node processes", *procs)
        a.go()
        b.go()
        started = time.monotonic()

        def settled() -> bool:
            exited = [p.proc.poll() is not None for p in (a, b)]
            return all(exited) or (any(exited) and any(p.has(READY) for p in (a, b)))

        wait_until(settled, START, "one node to run and the other to exit", a, b)
        assert a.proc.poll() is None or b.proc.poll() is None, f"both exited: {a.lines} | {b.lines}"
        winner, loser = (a, b) if a.has(READY) else (b, a)
        decided = time.monotonic() - started
        assert loser.proc.wait(timeout=START) == 2, loser.lines
        loser.stop()  # it has exited: this only waits for the last of its output
        errors = [line for line in loser.lines if line.startswith("error:")]
        assert len(errors) == 1 and not any("Traceback" in line for line in loser.lines), loser.lines
        match = ERROR.fullmatch(errors[0])
        assert match, errors[0]
        assert (int(match[1]), int(match[2])) == (domain, winner.proc.pid), errors[0]
        time.sleep(0.5)
        assert winner.proc.poll() is None, winner.lines  # still running: the loser on the graph did not refuse it
        winner.proc.kill()  # kill -9
        killed = time.monotonic()
        # A signal is delivered at once but a process with many threads dies a little later (on a busy machine,
        # a second later): its files, and so its lock, close when it has exited, which wait() sees. A supervisor
        # learns of the death the same way before it starts the next one.
        winner.proc.wait(timeout=START)
        c.go()
        wait_until(lambda: c.has(READY) or c.proc.poll() is not None, START, "a node after kill -9", c)
        assert c.has(READY) and c.proc.poll() is None, c.lines
        restarted = time.monotonic() - killed
        return f"round {number}: one of two ran, the other exited 2 after {decided:.2f} s; a new one ran {restarted:.2f} s after kill -9"
    finally:
        for p in procs:
            p.stop()


def scenario(rounds: int) -> None:
    from teachbot.ros_env import configure_loopback

    domain = int(configure_loopback()["ROS_DOMAIN_ID"])
    for number in range(1, rounds + 1):
        print(one_round(number, domain), flush=True)


def node() -> int:
    """A skills node that starts on the first line of stdin (both contenders then race from the same point)."""
    from teachbot.nodes.skills_node import main

    print("waiting for go", flush=True)
    sys.stdin.readline()
    return main([])


if __name__ == "__main__":
    if sys.argv[1] == "scenario":
        scenario(int(sys.argv[2]))
    else:
        raise SystemExit(node())
