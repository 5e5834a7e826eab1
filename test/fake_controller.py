"""A stand-in for a real arm's drivers that speaks only their topics: it follows JointTrajectory
messages kinematically, publishes stamped JointState, and has a gripper that closes on nothing."""

from __future__ import annotations

import threading
import time

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from teachbot_interfaces.msg import GripperCommand
from trajectory_msgs.msg import JointTrajectory

from teachbot.nodes.common import COMMAND_QOS
from teachbot.robot_profile import RobotProfile


class FakeController(Node):
    def __init__(self, profile: RobotProfile, rate: float = 200.0) -> None:
        super().__init__("fake_controller")
        self.profile = profile
        self.q = np.array(profile.home, float)
        self.width = profile.gripper.max_width
        self.width_target = self.width
        self.trajectories: list[JointTrajectory] = []
        self._traj: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()
        self.pub = self.create_publisher(JointState, profile.topics["joint_states"], COMMAND_QOS)
        self.create_subscription(JointTrajectory, profile.topics["joint_trajectory"], self.on_trajectory, COMMAND_QOS)
        self.create_subscription(GripperCommand, profile.topics["gripper_command"], self.on_gripper, COMMAND_QOS)
        self.create_timer(1.0 / rate, self.tick)

    def on_trajectory(self, msg: JointTrajectory) -> None:
        with self._lock:
            self.trajectories.append(msg)
            if not msg.points:
                self._traj = None
                return
            order = [msg.joint_names.index(n) for n in self.profile.arm_joints]
            t = np.array([0.0] + [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points])
            q = np.array([self.q] + [[p.positions[i] for i in order] for p in msg.points])
            self._traj = (time.monotonic(), t, q, q[-1])

    def on_gripper(self, msg: GripperCommand) -> None:
        self.width_target = float(np.clip(msg.position, 0.0, self.profile.gripper.max_width))

    def tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._traj is not None:
                start, t, q, _ = self._traj
                elapsed = min(now - start, t[-1])
                self.q = np.array([np.interp(elapsed, t, q[:, i]) for i in range(q.shape[1])])
                if elapsed >= t[-1]:
                    self._traj = None
        step = 0.2 / 200.0  # finger speed 0.2 m/s
        self.width += float(np.clip(self.width_target - self.width, -step, step))
        msg = JointState(name=list(self.profile.joint_names), position=[*self.q.tolist(), self.width / 2, self.width / 2])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.pub.publish(msg)
