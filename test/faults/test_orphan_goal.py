"""The skills node cancels a goal whose action client was killed, and the arm stops (issue 31, item 10).

An interaction manager killed in the middle of a skill must not leave the arm finishing it for up to two
minutes with nobody to read the result. The sim and skills nodes run in this scenario's process; the
client is a child process that sends a slow move_to goal and is killed with SIGKILL once the arm moves.
Within a few seconds (the graph's lease of about 1.5 s, the skills node's poll, a control step) the goal
must end as cancelled, with the skills node's warning, and the arm must be still, far from its target.
The control run keeps the client: the same goal must still be running and the arm moving, so the test
can fail. Runs in a child process on a ROS domain of its own (see test_node_kill.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import deadline, pytest_timeout, timeout

TARGET = (0.28, -0.75, 0.08)  # in the workspace, far from home: a long path
SPEED = 0.02  # of the arm's maximum: the move takes far longer than the cancel may
# seconds from the kill to a cancelled goal and a still arm: the lease, the poll, a control step; scaled, so that a
# loaded machine does not fail the test (the control run shows the goal would have gone on for longer than this)
STOPPED_WITHIN = 5.0


@pytest.mark.parametrize("client_killed", [True, False])
def test_a_goal_whose_client_was_killed_is_cancelled_and_the_arm_stops(client_killed: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root / "test"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, __file__, "kill" if client_killed else "keep"], env=env,
                         capture_output=True, text=True, timeout=pytest_timeout(240))
    print(run.stdout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]


def test_the_watch_waits_for_every_client_that_could_have_sent_the_goal() -> None:
    """ROS-free: a listener is no client; a client seen when the goal ran must leave, every one of them; a
    restarted node of the same name (a new GID) is not the one that left; nothing is orphaned before a client was seen."""
    from teachbot.skills.goal_clients import GoalClientWatch

    graph: dict[object, tuple[str, str]] = {}
    clients = {("interaction_manager", "/"), ("rehearsal", "/")}
    watch = GoalClientWatch(lambda: dict(graph), lambda node: node in clients)
    assert watch.left() == ""  # nobody seen yet: never orphaned
    graph.update({1: ("interaction_manager", "/"), 2: ("recorder", "/"), 3: ("rehearsal", "/")})
    assert watch.left() == "" and watch.candidates == ["/interaction_manager", "/rehearsal"]
    del graph[1]
    assert watch.left() == ""  # the rehearsal client may have sent it
    del graph[3]
    graph[4] = ("interaction_manager", "/")  # restarted: the same name, another endpoint
    assert watch.left() == "/interaction_manager, /rehearsal"


def client() -> None:
    """The child that plays the interaction manager: send the slow goal, say so, then wait to be killed."""
    import rclpy
    from teachbot_interfaces.action import MoveTo

    from teachbot.nodes.action_client import ActionClient

    rclpy.init()
    node = rclpy.create_node("doomed_client")
    action = ActionClient(node, MoveTo, "skills/move_to")
    if not action.wait_for_server(timeout_sec=timeout(60.0)):
        raise SystemExit("no skills/move_to server")
    goal = MoveTo.Goal(speed_factor=SPEED)
    goal.position.x, goal.position.y, goal.position.z = TARGET
    future = action.send_goal_async(goal)
    rclpy.spin_until_future_complete(node, future, timeout_sec=timeout(30.0))
    handle = future.result()
    if handle is None or not handle.accepted:
        raise SystemExit("the goal was not accepted")
    print("accepted", flush=True)
    while True:
        rclpy.spin_once(node, timeout_sec=0.1)


def scenario(kill: bool) -> None:
    import threading

    import numpy as np
    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from sensor_msgs.msg import JointState

    from teachbot.nodes.common import COMMAND_QOS
    from teachbot.nodes.sim_node import SimNode
    from teachbot.nodes.skills_node import SkillsNode

    rclpy.init()
    sim = SimNode(camera_enabled=False)
    skills = SkillsNode()
    warnings: list[str] = []
    warn = skills.get_logger().warning
    skills.get_logger().warning = lambda message, **kw: warnings.append(str(message)) or warn(message, **kw)  # type: ignore[method-assign]
    ended: list[str] = []
    run = skills._run  # the skill's outcome, as the action server turns it into the goal's result

    def recorded(*args, **kwargs):
        outcome = run(*args, **kwargs)
        ended.append(f"{outcome.code.name}: {outcome.message}")
        return outcome

    skills._run = recorded  # type: ignore[method-assign]
    probe = rclpy.create_node("arm_probe")
    arm = list(sim.profile.arm_joints)
    joints: list[tuple[float, np.ndarray]] = []
    probe.create_subscription(JointState, sim.profile.topics["joint_states"],
                              lambda m: joints.append((time.monotonic(), np.array([m.position[list(m.name).index(j)] for j in arm]))),
                              COMMAND_QOS)
    executor = MultiThreadedExecutor(num_threads=3)
    for node in (sim, skills, probe):
        executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    child = subprocess.Popen([sys.executable, __file__, "client"], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # bounded by the whole run's limit; the child gives up on its own sooner
        assert line.strip() == "accepted", f"the client said {line!r}"
        until = deadline(20.0)
        while not joints:
            assert time.monotonic() < until, "no joint states"
            time.sleep(0.05)
        start = joints[-1][1]
        while float(np.max(np.abs(joints[-1][1] - start))) <= 0.01:
            assert time.monotonic() < until, f"the arm did not start moving; the goal ended: {ended}"
            time.sleep(0.02)
        killed = time.monotonic()
        if kill:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        until = killed + timeout(STOPPED_WITHIN)
        while not ended and time.monotonic() < until:  # the control waits the whole bound out
            time.sleep(0.05)
        took = time.monotonic() - killed
        time.sleep(0.5)  # joint states after the end: is the arm still?
        window = [q for t, q in joints if t > time.monotonic() - 0.4]
        moved = float(np.max(np.abs(window[-1] - window[0])))
        print(f"client {'killed' if kill else 'kept'}: goal {ended or 'still running'} after {took:.2f} s; "
              f"the arm moved {moved:.4f} rad in the last 0.4 s; warnings {warnings}")
        if kill:
            assert ended and ended[0].startswith("CANCELED: canceled: its action client (/doomed_client) left the ROS graph"), ended
            assert any("left the ROS graph: cancelling the goal and holding the arm" in w for w in warnings), warnings
            assert moved < 1e-3, f"the arm still moved {moved:.4f} rad after the goal was cancelled"
        else:  # the control: with its client alive the goal goes on past the bound, the arm moving
            assert not ended and not warnings, (ended, warnings)
            assert moved > 1e-3, f"the arm moved only {moved:.4f} rad with its client alive"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        executor.shutdown(timeout_sec=2.0)
        skills.close()
        sim.close()
        for node in (sim, skills, probe):
            node.destroy_node()
        rclpy.shutdown()


if __name__ == "__main__":
    from teachbot.ros_env import configure_loopback

    configure_loopback()
    client() if sys.argv[1] == "client" else scenario(sys.argv[1] == "kill")
