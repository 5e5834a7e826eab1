"""Recording a running in-process stack into a session bag (``teachbot sim --record``, the demo, the
console stack): the recorder node joins the stack, the action servers publish their goals and results
for it, and the bag starts with the session's spec and the world as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rclpy.action import ActionServer
from rclpy.qos import QoSProfile
from rclpy.service_introspection import ServiceIntrospectionState

from teachbot.nodes.recorder_node import TRANSCRIPT_DEPTH, RecorderNode
from teachbot.nodes.sim_node import SimNode
from teachbot.recording.bag import SessionSpec

__all__ = ["Recording", "enable_action_introspection", "scene_of", "start_recording"]


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
    spec = spec or SessionSpec(robot_profile=getattr(stack, "robot_profile", "panda_sim"))
    node = RecorderNode(output=str(path), storage=storage, camera=camera, robot_profile=spec.robot_profile)
    enable_action_introspection(list(stack.nodes))
    stack.add_node(node)
    if not spec.scene_yaml:
        spec.scene_yaml, spec.seed = scene_of(stack)
    node.write_spec(spec)
    node.snapshot_world()
    return Recording(node)
