"""kill -9 of a node in the middle of a skill (issue 15, item 4).

The sim, skills, perception, memory and improvement nodes run under teachbot.nodes.supervisor (``teachbot sim
--processes``), each in its own process; the interaction manager with a scripted model runs in the test's
process. A long skill starts from the console, then one node's process is killed with SIGKILL: within moments the
console's transcript shows one error line, the arm stops, the supervisor restarts the node, and the next request
succeeds. A vanished skills node is noticed by the skill call itself, a vanished sim by the skills node (its joint
states stop), the others by the interaction manager's stack watchdog (teachbot.nodes.stack_watchdog), which
cancels the goal. The restarted memory node reads its store again (an example added before the kill is
retrieved after it) and the restarted perception node publishes its object list again. The stacks run in a child
process on a ROS domain of their own (see test_household_ros.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from timing import deadline, pytest_timeout, timeout

# seconds from kill -9 to the console's error line within which the fault counts as detected by the stack (the graph's
# lease, about 1 s, plus the watchdog's poll and a cancel) rather than by the skill's own 120 s timeout or never.
# Scaled like every wait: the 2 s goal of issue 15 is a speed goal, measured by bench/fault_recovery.py on a quiet
# machine; a test's verdict does not depend on how busy the machine is (a CI run beside other work took 3.1 s).
DETECTED = 10.0
SCENE = ("objects:\n  - {category: block, color: red, position: [-0.15, -0.5]}\n"
         "  - {category: bowl, color: blue, position: [0.2, -0.35]}\n")
CALL = "put_first_on_second('red block', 'blue bowl')"
NODES = ("sim", "skills", "perception", "memory", "improvement")
WATCHED = ("perception", "memory", "improvement")  # the ones the interaction manager's watchdog reports
CAMERA = {"camera_width": 320, "camera_height": 240, "camera_rate": 2.0}  # enough for perception, cheap to render
LESSON = "stack the red block on the blue bowl very slowly"  # an example added before a memory kill


@pytest.mark.parametrize("victim", ["skills", "sim", "perception", "memory", "improvement"])
def test_kill_9_mid_skill_one_error_line_then_the_restarted_node_works(victim: str) -> None:
    run = run_child(__file__, victim)
    report = [line for line in run.stdout.splitlines() if line.startswith("kill->")]
    print("\n".join(report))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert report


def run_child(script: str, *args: str, seconds: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a child process on a ROS domain of its own (not the session stack's), for up to ``seconds``
    (scaled)."""
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root / "test"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True,
                          timeout=pytest_timeout(seconds))


def test_ros2_launch_respawns_every_node_after_the_supervisors_delay() -> None:
    from teachbot.nodes.launching import node_arguments
    from teachbot.nodes.nodeset import node_set
    from teachbot.nodes.supervisor import RESPAWN_DELAY

    for spec in node_set("sim", {"console": True}):
        arguments = node_arguments(spec)
        assert arguments["respawn"] is True and arguments["respawn_delay"] == RESPAWN_DELAY, spec.name
        assert arguments["executable"] == spec.executable and arguments["parameters"] == [spec.parameters]


def test_the_supervisor_restarts_a_dying_node_up_to_its_cap_and_says_so() -> None:
    """A node whose class cannot be imported dies at once: restarted twice (the cap), then left down."""
    from teachbot.nodes.nodeset import NodeSpec
    from teachbot.nodes.supervisor import Supervisor

    log: list[str] = []
    supervisor = Supervisor([NodeSpec("broken", "broken", "teachbot.no_such_module:Node")], respawn_delay=0.1,
                            max_restarts_per_minute=2, log=log.append)
    supervisor.start()
    try:
        wait_until(lambda: supervisor.children["broken"].given_up, 60.0, "the supervisor to give up")
    finally:
        supervisor.stop()
    assert sum("restarted (pid" in line for line in log) == 2, log
    assert sum("exited with status" in line for line in log) == 3, log
    assert "stays down" in log[-1], log


def test_the_watchdog_tells_once_of_a_node_that_leaves_during_a_motion() -> None:
    """GraphWatch: a node absent when the motion starts is not missed; a restart faster than the lease (same name,
    new /rosout publisher) is a departure; a publisher discovered late is not; a node joining mid-motion is watched."""
    from teachbot.nodes.stack_watchdog import GraphWatch

    watch = GraphWatch(("perception", "memory"))
    old, new, mem = frozenset({"p1"}), frozenset({"p2"}), frozenset({"m1"})
    assert watch.moving({"perception": old}) == []  # no memory node in this stack: never complained about
    assert watch.moving({"perception": old}) == []
    assert watch.moving({}) == ["perception"]
    assert watch.moving({}) == []  # told once
    watch.idle()
    assert watch.moving({"perception": old, "memory": frozenset()}) == []  # memory's publisher not discovered yet
    assert watch.moving({"perception": old | new, "memory": mem}) == []  # the restarted one is up, the old one not gone yet
    assert watch.moving({"perception": new, "memory": mem}) == ["perception"]
    assert watch.moving({"perception": new, "memory": frozenset({"m2"})}) == ["memory"]
    assert watch.moving({"perception": new}) == []  # the restarted perception joined during the motion
    assert watch.moving({}) == ["perception"]
    watch.idle()
    assert watch.moving({}) == [] and watch.moving({"memory": mem}) == [] and watch.moving({}) == ["memory"]


def wait_until(predicate: Callable[[], object], seconds: float, what: str) -> None:
    """Poll ``predicate``; fail after ``seconds`` (scaled by test/timing.py)."""
    until = deadline(seconds)
    while not predicate():
        assert time.monotonic() < until, f"timed out after {timeout(seconds):.0f} s waiting for {what}"
        time.sleep(0.02)


class Stack:
    """Supervised ``nodes`` plus the interaction manager and a person in this process.

    ``script``: the scripted model's answers (default: CALL then wait_for_trigger(), ``requests`` times);
    ``llm``: node_set LLM arguments for the improvement node (default: a scripted model that is never asked);
    ``console``: overrides of config/interaction.yaml for the interaction manager. The memory store is a fresh
    temporary directory."""

    def __init__(self, requests: int = 2, *, nodes: Sequence[str] = NODES, script: Iterable[str] | None = None,
                 llm: Mapping[str, str] | None = None, console: Mapping[str, Any] | None = None) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState
        from teachbot_interfaces.msg import DialogTurn, ObjectList

        from teachbot.llm.scripted import ScriptedModel
        from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS
        from teachbot.nodes.interaction_manager_node import InteractionManagerNode
        from teachbot.nodes.nodeset import node_set
        from teachbot.nodes.supervisor import Supervisor

        self.log: list[str] = []
        self.nodes = tuple(nodes)
        self.home = Path(tempfile.mkdtemp(prefix="teachbot-kill-"))
        self.learned = self.home / "learned"
        values = {"robot_profile": "panda_sim", "camera": "perception" in self.nodes, "memory": str(self.learned),
                  **(llm or {"llm_backend": "scripted"})}
        specs = node_set("sim", values, only=self.nodes, extra_parameters={"sim": CAMERA, "improvement": {"distill": False}})
        self.supervisor = Supervisor(specs, respawn_delay=0.3, log=self._log)
        self.supervisor.start()
        rclpy.init()
        self.model = ScriptedModel(list(script) if script is not None else [CALL, "wait_for_trigger()"] * requests)
        self.node = InteractionManagerNode(interaction_model=self.model, function_model=ScriptedModel([]), dialog_timeout=60.0,
                                           memory=str(self.learned), **dict(console or {}))
        self.person = rclpy.create_node("person")
        self.joints: list[tuple[float, list[float]]] = []  # (arrival, positions) of the arm's joint states
        self.objects: list[tuple[float, list[str]]] = []  # (arrival, names) of perception's object lists
        self.person.create_subscription(JointState, "/joint_states",
                                        lambda m: self.joints.append((time.monotonic(), list(m.position[:7]))), COMMAND_QOS)
        self.person.create_subscription(ObjectList, "/perception/objects",
                                        lambda m: self.objects.append((time.monotonic(), [o.name for o in m.objects])),
                                        LATCHED_QOS)
        self.speak_pub = self.person.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.executor.add_node(self.person)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        try:
            if "skills" in self.nodes:
                self.node.skills.wait_ready(timeout(90.0))
                self.node.skills.reset(scene_yaml=SCENE)
            for name in self.nodes:  # the watchdog watches only nodes that are up when a motion starts
                self.wait_up(name, 0.0, 120.0)
            wait_until(lambda: self.person.count_subscribers("dialog/user") > 0, 30.0, "the console's dialog subscription")
            # the console is ready once it waits for the person (it may have opened the example store itself first)
            wait_until(lambda: self.node.session is not None, 300.0, "the console's first wait for the person")
        except BaseException as exc:
            self.close()
            raise AssertionError(f"the stack did not come up: {exc}") from exc

    def _log(self, line: str) -> None:
        """The supervisor's line: kept for the checks, and on stderr for the report of a failure."""
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)

    def wait_up(self, name: str, since: float, seconds: float) -> None:
        """Wait until node ``name`` serves the console (perception: an object list of the scene sent after ``since``)."""
        if name == "perception":
            wait_until(lambda: any(t > since and {"red block", "blue bowl"} <= set(names) for t, names in self.objects),
                       seconds, "an object list with the red block and the blue bowl")
        elif name == "memory":
            wait_until(self.node.retrieve_client.service_is_ready, seconds, "memory/retrieve")
        elif name == "improvement":
            wait_until(self.node.improve_client.service_is_ready, seconds, "improvement/improve")

    def lines(self) -> list[str]:
        return self.node.session.transcript.render().splitlines()

    def speak(self, text: str) -> None:
        from teachbot_interfaces.msg import DialogTurn

        self.speak_pub.publish(DialogTurn(speaker="user", type="dialog", text=text))

    def add_example(self, instruction: str) -> str:
        """Store a learned example for ``instruction`` through memory/add; its transcript."""
        from teachbot_interfaces.msg import InteractionExample
        from teachbot_interfaces.srv import AddExample

        transcript = (f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': '{instruction}'}}\n"
                      ">>> put_first_on_second('red block', 'blue bowl', speed=0.05)\n'success'")
        client = self.person.create_client(AddExample, "/memory/add")
        try:
            wait_until(client.service_is_ready, 30.0, "memory/add")
            future = client.call_async(AddExample.Request(example=InteractionExample(
                profile="tabletop", source="learned", transcript=transcript, instructions=[instruction])))
            wait_until(future.done, 30.0, "memory/add's answer")
            assert future.result().success, future.result().message
        finally:
            self.person.destroy_client(client)
        return transcript

    def close(self) -> None:
        import rclpy

        self.node.close()  # while the executor spins: a statement waiting on a service ends
        self.executor.shutdown(timeout_sec=2.0)
        self.thread.join(timeout=2.0)
        self.node.destroy_node()
        self.person.destroy_node()
        self.supervisor.stop()
        rclpy.shutdown()  # a benchmark builds one stack after another in the same process
        shutil.rmtree(self.home, ignore_errors=True)


def kill(stack: Stack, victim: str, until: Callable[[], bool] | None = None) -> float:
    """kill -9 the node ``victim`` (once ``until()``, when given): the time.monotonic() of the kill."""
    if until is not None:
        wait_until(until, 30.0, f"the moment to kill {victim}")
    os.kill(stack.supervisor.pid(victim), signal.SIGKILL)
    return time.monotonic()


def kill_mid_skill(stack: Stack, victim: str, request: str) -> tuple[float, str, float]:
    """Say ``request``, kill -9 ``victim`` one second into the skill: seconds to the console's next line,
    that line, and the time of the kill (time.monotonic())."""
    calls = stack.lines().count(f">>> {CALL}")
    stack.speak(request)
    wait_until(lambda: stack.lines().count(f">>> {CALL}") > calls, 30.0, "the statement")
    time.sleep(1.0)  # the arm is moving to the block
    wait_until(lambda: stack.joints and time.monotonic() - stack.joints[-1][0] < 0.2, 5.0, "joint states")
    before = len(stack.lines())
    killed = kill(stack, victim)
    wait_until(lambda: len(stack.lines()) > before, 30.0, "the console's error line")
    return time.monotonic() - killed, stack.lines()[before], killed


def await_restart(stack: Stack, victim: str, restarts: int, killed: float) -> None:
    """Wait for the supervisor's ``restarts``-th restart of ``victim`` and for it to serve again; open the gripper,
    send the arm home and reset the scene (a scene reset with the stopped arm's closed fingers where the block
    reappears lets the simulator's grasp assist fix the block to the hand)."""
    wait_until(lambda: sum(f"node {victim} restarted" in line for line in stack.log) >= restarts, 10.0, "the restart")
    restarted = time.monotonic()
    if victim == "sim":  # a skill sent before the new driver publishes fails at once, as it should: wait for it
        wait_until(lambda: stack.joints and stack.joints[-1][0] > restarted, 120.0, "joint states from the restarted sim")
    if "skills" in stack.nodes:
        stack.node.skills.wait_ready(timeout(60.0))
        for skill, fields in (("gripper", {"close": False}), ("go_home", {})):
            result = stack.node.skills.call(skill, timeout=timeout(30.0), **fields)
            assert result.success, f"{skill}: {result.message}"
        stack.node.skills.reset(scene_yaml=SCENE)
    stack.wait_up(victim, killed, 120.0)


def scenario(victim: str) -> None:
    """Kill ``victim`` one second into a put_first_on_second: the error line, the arm still, the restart, success."""
    stack = Stack()
    try:
        lesson = stack.add_example(LESSON) if victim == "memory" else ""
        before = 3  # wait_for_trigger(), the person's words and the call: the error line follows
        elapsed, error, killed = kill_mid_skill(stack, victim, "put the red block in the blue bowl")
        print(f"kill->error {victim}: {elapsed:.2f} s: {error}", flush=True)
        assert elapsed <= timeout(DETECTED), f"the error line came {elapsed:.2f} s after kill -9 of {victim}: {error}"
        if victim in WATCHED:
            assert error.startswith(f"StackFault: the {victim} node left the ROS graph") and "stopped the arm" in error, error
        else:
            assert error.startswith(("ControllerError:", "'the arm")) or "joint states stopped" in error, error
        time.sleep(0.5)
        assert [line for line in stack.lines()[before:] if not line.startswith(">>>")][:1] == [error]  # one error line
        # the arm stops: its joint states (when the sim lives) no longer change from half a second after the error
        # line (the halt has been sent by then; the wait for those joint states is scaled)
        if victim != "sim":
            reported = killed + elapsed
            wait_until(lambda: stack.joints[-1][0] > reported + 1.0, 10.0, "joint states after the error line")
            late = [q for t, q in stack.joints if t > reported + 0.5]
            drift = max(abs(a - b) for a, b in zip(late[0], late[-1]))
            assert drift < 1e-3, f"the arm still moved {drift:.4f} rad after the error line on the {victim} node"
        await_restart(stack, victim, 1, killed)
        assert any(f"node {victim} (pid" in line and "SIGKILL" in line for line in stack.log), stack.log
        if victim == "memory":  # the restarted node read the store from disk: the example added before is found
            found = stack.node._retrieve("tabletop", [LESSON], 4)
            assert any(lesson in text for text in found), found
        stack.speak("try again")
        wait_until(lambda: stack.lines().count(f">>> {CALL}") == 2 and stack.lines()[-1] != f">>> {CALL}", 60.0,
                   "the second request")
        lines = stack.lines()
        assert lines[lines.index(f">>> {CALL}", before) + 1] == "'success'", lines
        assert not stack.node.core.prompts.examples.using_local, "the second request's examples did not come from the memory node"
    finally:
        stack.close()


if __name__ == "__main__":
    from teachbot.ros_env import configure_loopback

    configure_loopback()
    scenario(sys.argv[1])
