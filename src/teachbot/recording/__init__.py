"""Recording sessions into rosbag2 files and replaying them as regression tests.

ROS-free: :mod:`.types` (the rosbags type store with teachbot_interfaces), :mod:`.bag` (writer, reader,
:class:`SessionSpec`), :mod:`.replay_model` (recorded completions as the LLM), :mod:`.compare`.
With rclpy: :func:`start_recording` (record any running in-process stack, e.g. ``teachbot sim --record``),
:mod:`.console_stack` (the whole stack around scripted or recorded LLMs and a scripted person) and
:mod:`.replay` (``teachbot replay BAG --check``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from teachbot.recording.bag import BagError, RecordedSession, SessionSpec

if TYPE_CHECKING:
    from teachbot.nodes.recorder_node import RecorderNode

__all__ = ["BagError", "RecordedSession", "Recording", "SessionSpec", "start_recording"]


class Recording:
    """A running recording; :meth:`stop` writes the final world state and closes the bag."""

    def __init__(self, node: RecorderNode) -> None:
        self.node = node
        self.path: Path = node.path
        self._stopped = False

    def stop(self) -> Path:
        """Finish the bag (idempotent) and return its directory. Call before the stack stops."""
        if not self._stopped:
            self._stopped = True
            self.node.snapshot_world()
            self.node.close()
        return self.path


def enable_action_introspection(nodes: list[Any]) -> int:
    """Let every action server among ``nodes`` publish its goal and result events (for the bag); returns how many."""
    from rclpy.action import ActionServer
    from rclpy.qos import QoSProfile
    from rclpy.service_introspection import ServiceIntrospectionState

    from teachbot.nodes.recorder_node import TRANSCRIPT_DEPTH

    count = 0
    for node in nodes:
        for waitable in list(getattr(node, "waitables", [])):
            if isinstance(waitable, ActionServer):
                waitable.configure_introspection(node.get_clock(), QoSProfile(depth=TRANSCRIPT_DEPTH // 5),
                                                 ServiceIntrospectionState.CONTENTS)
                count += 1
    return count


def scene_of(stack: Any) -> tuple[str, int | None]:
    """The scene YAML and seed the stack's simulator holds now (("", None) without an in-process sim)."""
    from teachbot.nodes.sim_node import SimNode

    for node in getattr(stack, "nodes", []):
        if isinstance(node, SimNode):
            with node.lock:
                scene = node.world.scene
            if scene is not None:
                return scene.to_yaml(), scene.seed
    return "", None


def start_recording(stack: Any, path: str | Path, *, spec: SessionSpec | None = None, storage: str = "mcap",
                    camera: bool = False) -> Recording:
    """Record the running in-process stack (an InProcessStack or anything with ``nodes`` and ``add_node``).

    Call it after ``stack.start()`` and before the interaction manager is added, so the session is
    complete from its first line (transcript and completions are transient local, so a later start
    still gets the recent history). Skill goals and results come from the action servers' introspection,
    which this turns on. ``spec`` defaults to the robot profile and the scene the simulator holds now.
    """
    from teachbot.nodes.recorder_node import RecorderNode

    spec = spec or SessionSpec(robot_profile=getattr(stack, "robot_profile", "panda_sim"))
    node = RecorderNode(output=str(path), storage=storage, camera=camera, robot_profile=spec.robot_profile)
    enable_action_introspection(list(stack.nodes))
    stack.add_node(node)
    if not spec.scene_yaml:
        spec.scene_yaml, spec.seed = scene_of(stack)
    node.write_spec(spec)
    node.snapshot_world()
    return Recording(node)
