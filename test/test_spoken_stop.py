"""A spoken stop (teachbot.interaction.spoken_stop): "stop" said while the arm moves cancels the goals in flight
and refuses robot calls until the console hears the person; over ROS with the interaction manager, a memory
node and a skills node whose grasp runs until it is cancelled."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.errors import CanceledError
from teachbot.interaction.spoken_stop import INTERRUPTED, SpokenStop


# ---------------------------------------------------------------------------------------- without ROS
def test_only_stop_words_said_while_the_robot_moves_stop_it() -> None:
    stop = SpokenStop(["stop", "hold on"])
    assert not stop.heard("Stop that for now.", moving=False) and not stop.pending  # nothing moves: only words
    assert not stop.heard("what a nice stopwatch", moving=True)  # a word, not a part of one
    assert stop.heard("Hold   on, please", moving=True) and stop.pending
    assert stop.heard("STOP that for now. First sort the fruits.", moving=True)


def test_robot_calls_are_refused_until_the_console_hears_the_person() -> None:
    stop = SpokenStop()
    heard = []
    functions = stop.wrap({"wait_for_trigger": lambda: heard.append(1) or {"text": "stop"}, "grasp": lambda n: n})
    stop.check("grasp")  # no stop: nothing raised
    stop.heard("stop!", moving=True)
    with pytest.raises(CanceledError, match="grasp did not start: the person is talking to you"):
        stop.check("grasp")
    assert functions["grasp"]("apple") == "apple"  # only skill goals are refused (StoppableSkills), not the function
    assert functions["wait_for_trigger"]() == {"text": "stop"} and heard == [1]
    assert not stop.pending
    stop.check("grasp")
    assert INTERRUPTED in str(stop.fault("grasp", "stopped the arm"))


# ---------------------------------------------------------------------------------------- over ROS
def test_a_spoken_stop_cancels_the_moving_arm_on_the_robot(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("ROS_DOMAIN_ID", None)  # configure_loopback picks a domain of its own
    run = subprocess.run([sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=pytest_timeout(280))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "ok: spoken stop" in run.stdout, run.stdout


class FlatEmbedder:
    """A sentence embedder that loads nothing (the manager's example store, opened in its process)."""

    name = "flat"
    dimension = 8

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.full((len(texts), 8), 8 ** -0.5, dtype=np.float32)


class SlowSkills:
    """Perception's object list and household grasp/place_object skills; grasping the apple runs until it is
    cancelled (at most 60 s), as an arm that is still moving."""

    def __init__(self) -> None:
        import rclpy
        from geometry_msgs.msg import Point, Pose, Vector3
        from rclpy.action import ActionServer, CancelResponse
        from rclpy.callback_groups import ReentrantCallbackGroup
        from teachbot_interfaces.action import HouseholdSkill
        from teachbot_interfaces.msg import DetectedObject, ObjectList

        from teachbot.nodes.common import LATCHED_QOS

        self.node = rclpy.create_node("skills")
        self.moving, self.cancelled = threading.Event(), threading.Event()
        self.goals: list[tuple[str, str]] = []
        objects = self.node.create_publisher(ObjectList, "/perception/objects", LATCHED_QOS)
        positions = {"apple": (1.0, 0.3, 0.78), "banana": (1.0, 0.5, 0.77), "box 1": (1.5, 0.0, 0.8)}
        self.node.create_timer(0.1, lambda: objects.publish(ObjectList(objects=[
            DetectedObject(name=n, label=n.split()[0], pose=Pose(position=Point(x=p[0], y=p[1], z=p[2])),
                           size=Vector3(x=0.07, y=0.07, z=0.07)) for n, p in positions.items()])))
        group = ReentrantCallbackGroup()  # the cancel is served while the grasp still runs
        self.servers = [ActionServer(self.node, HouseholdSkill, f"skills/{name}", self._execute(name), callback_group=group,
                                     cancel_callback=lambda _goal: CancelResponse.ACCEPT) for name in ("grasp", "place_object")]

    def _execute(self, name: str):
        from teachbot_interfaces.action import HouseholdSkill
        from teachbot_interfaces.msg import SkillResult

        def execute(goal):
            self.goals.append((name, goal.request.target))
            if name == "grasp" and goal.request.target == "apple":
                self.moving.set()
                until = time.monotonic() + 60.0
                while time.monotonic() < until and not goal.is_cancel_requested:
                    time.sleep(0.02)
                if goal.is_cancel_requested:
                    self.cancelled.set()
                    goal.canceled()
                    return HouseholdSkill.Result(result=SkillResult(success=False, code=SkillResult.CANCELED,
                                                                    message="cancelled"))
            goal.succeed()
            return HouseholdSkill.Result(result=SkillResult(success=True, code=SkillResult.SUCCESS, message="success"))

        return execute


def _scenario(root: Path) -> None:
    import rclpy
    import ros_graph
    from rclpy.executors import MultiThreadedExecutor
    from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate

    from teachbot.interaction import LocalExamples
    from teachbot.llm.scripted import ScriptedModel
    from teachbot.memory.episodic import EpisodicMemory
    from teachbot.memory.store import MemoryStore
    from teachbot.nodes import interaction_manager_node as manager_module
    from teachbot.nodes.common import COMMAND_QOS, TRANSCRIPT_QOS
    from teachbot.nodes.interaction_manager_node import InteractionManagerNode
    from teachbot.nodes.memory_node import MemoryNode
    from teachbot.ros_env import configure_loopback

    configure_loopback()
    rclpy.init()
    episodic = lambda: EpisodicMemory(MemoryStore(root / "learned"), FlatEmbedder())  # noqa: E731
    manager_module.LocalExamples = lambda learned: LocalExamples(learned, memory=episodic())
    model = ScriptedModel(["grasp('apple')", "place_object('box 1')", "wait_for_trigger()", "grasp('banana')",
                           "wait_for_trigger()"])
    skills = SlowSkills()
    spinner = MultiThreadedExecutor(num_threads=4)
    spinner.add_node(skills.node)
    spin = threading.Thread(target=spinner.spin, daemon=True)
    spin.start()
    manager = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), api_profile="household",
                                     memory=str(root / "learned"), dialog_timeout=60.0)
    memory = ros_graph.Graph(MemoryNode(episodic()), name="memory", prefix="spoken_stop")
    graph = ros_graph.Graph(manager, name="manager", prefix="spoken_stop")
    lines: list[str] = []
    graph.probe.create_subscription(TranscriptUpdate, "/interaction/transcript", lambda m: lines.extend(m.lines),
                                    TRANSCRIPT_QOS)
    speak = graph.probe.create_publisher(DialogTurn, "/dialog/user", COMMAND_QOS)

    def wait(predicate, what: str, timeout: float = 60.0) -> None:
        ros_graph.wait_until(predicate, timeout, what, period=0.02)

    try:
        wait(lambda: lines and lines[-1] == ">>> wait_for_trigger()", f"the console waiting; transcript {lines}", 240.0)
        wait(lambda: speak.get_subscription_count() > 0, "the dialog subscription")
        speak.publish(DialogTurn(speaker="user", type="dialog", text="put the apple into box 1"))
        wait(skills.moving.is_set, f"the arm moving to the apple; transcript {lines}")
        time.sleep(0.3)
        assert not skills.cancelled.is_set()
        speak.publish(DialogTurn(speaker="user", type="dialog", text="Stop that for now."))
        wait(skills.cancelled.is_set, "the grasp cancelled", 20.0)
        wait(lambda: model.served >= 5 and lines[-1] == ">>> wait_for_trigger()", f"all statements; transcript {lines}")
        start = lines.index(">>> grasp('apple')")
        assert lines[start + 1].startswith("CanceledError: grasp was interrupted") and INTERRUPTED in lines[start + 1], lines
        assert lines[start + 2:start + 4] == [">>> place_object('box 1')",
                                              f"CanceledError: place_object did not start: {INTERRUPTED}"], lines
        assert lines[start + 4:start + 6] == [">>> wait_for_trigger()", "{'type': 'dialog', 'text': 'Stop that for now.'}"]
        assert lines[start + 6:start + 8] == [">>> grasp('banana')", "'success'"], lines  # heard: the robot may move again
        assert skills.goals == [("grasp", "apple"), ("grasp", "banana")]  # no place_object goal was ever sent
        print("ok: spoken stop", flush=True)
    finally:
        graph.close()
        memory.close()
        spinner.shutdown()
        for server in skills.servers:
            server.destroy()
        rclpy.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # ros_graph, timing
    _scenario(Path(sys.argv[1]))
    # every check passed and every node was closed: leave without the interpreter's teardown, where a DDS or
    # executor thread still winding down once aborted the process ("terminate called without an active exception")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
