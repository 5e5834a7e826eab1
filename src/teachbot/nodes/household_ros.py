"""The household skills' interfaces over ROS: the base and the doors as joints, things from topics.

The base is three virtual joints (base_x, base_y, base_yaw) on the arm's controller topic and in its
joint states, like a holonomic base under ros2_control; door and drawer joints likewise. Things come
from the object list (positions, sizes) and the thing states (types, places, properties, flags).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
from rclpy.node import Node
from teachbot_interfaces.msg import ObjectList, ThingStates

from teachbot.errors import ControllerError
from teachbot.nodes.common import LATCHED_QOS
from teachbot.nodes.convert import object_info
from teachbot.skills.household import Thing
from teachbot.world.floor import BasePath, BasePose
from teachbot.world.household_layout import BASE_JOINTS, HouseholdLayout

ARRIVED = 0.01  # metres (and radians) from a path's end that count as arrived
ARTICULATION_TIME = 1.0  # seconds the door or drawer joint is given to reach its end point


class RosBase:
    """BaseInterface over the virtual base joints of a RosArm (its controller topic and joint states)."""

    def __init__(self, arm: Any) -> None:
        self.arm = arm
        self._end = (-math.inf, None)  # arm-clock time the path ends, its last pose

    def pose(self) -> BasePose:
        state = self.arm.joint_values(BASE_JOINTS)
        return BasePose(*state)

    def send_path(self, path: BasePath) -> None:
        if len(path.poses) < 2:
            return
        times = np.array(path.times[1:])
        positions = np.array([[p.x, p.y, p.yaw] for p in path.poses[1:]])
        self.arm.send_trajectory(BASE_JOINTS, times, positions)
        self._end = (self.arm.now() + path.duration, path.poses[-1])

    def moving(self) -> bool:
        end, goal = self._end
        if goal is None:
            return False
        if self.arm.now() < end:
            return True
        pose = self.pose()
        turn = abs((pose.yaw - goal.yaw + math.pi) % (2 * math.pi) - math.pi)
        return math.hypot(pose.x - goal.x, pose.y - goal.y) > ARRIVED or turn > ARRIVED

    def stop(self) -> None:
        pose = self.pose()
        self.arm.send_trajectory(BASE_JOINTS, np.array([0.05]), np.array([[pose.x, pose.y, pose.yaw]]))
        self._end = (-math.inf, None)


class RosHouseholdView:
    """HouseholdView over the object list, the thing states and the door and drawer joints."""

    def __init__(self, node: Node, objects_topic: str, states_topic: str, arm: Any, layout: HouseholdLayout, group: Any) -> None:
        self.arm, self.layout = arm, layout
        self._objects: dict[str, Any] = {}
        self._states: dict[str, Any] = {}
        self._lock = threading.Lock()
        node.create_subscription(ObjectList, objects_topic, self._on_objects, LATCHED_QOS, callback_group=group)
        node.create_subscription(ThingStates, states_topic, self._on_states, LATCHED_QOS, callback_group=group)

    def _on_objects(self, msg: ObjectList) -> None:
        with self._lock:
            self._objects = {o.name: object_info(o) for o in msg.objects}

    def _on_states(self, msg: ThingStates) -> None:
        with self._lock:
            self._states = {t.name: t for t in msg.things}

    def things(self) -> dict[str, Thing]:
        with self._lock:
            objects, states = dict(self._objects), dict(self._states)
        out = {}
        for name, o in objects.items():
            s = states.get(name)
            flags: dict[str, Any] = dict(zip(s.state_names, s.state_values)) if s else {}
            if s is not None:
                flags["held"] = s.held
                if s.contents:
                    flags["contents"] = s.contents
            out[name] = Thing(name, s.type if s else o.category, o.position, o.size, o.yaw, s.place if s else "",
                              bool(s.inside) if s else False, frozenset(s.properties) if s else frozenset(), flags)
        return out

    def place_states(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            states = dict(self._states)
        return {n: dict(zip(states[n].state_names, states[n].state_values)) for n in self.layout.places if n in states}

    def opening(self, place: str) -> float:
        p = self.layout.place(place)
        if not p.joint:
            raise ControllerError(f"{place!r} has no door or drawer joint")
        return float(self.arm.joint_values((p.joint,))[0]) / p.joint_limit

    def handle(self, place: str, inner: bool = False) -> np.ndarray:
        return np.array(self.layout.handle(place, self.opening(place), inner))

    def drive_articulation(self, place: str, open_: bool, fraction: float = 1.0) -> None:
        p = self.layout.place(place)
        self.arm.send_trajectory((p.joint,), np.array([ARTICULATION_TIME]), np.array([[p.joint_limit * fraction if open_ else 0.0]]))
