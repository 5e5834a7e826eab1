"""What the skills need from the outside world, as small protocols.

``ArmInterface`` is the controller interface a real arm has (a trajectory in, joint states out, a
gripper width command); ``ObjectSource`` gives object positions (simulator ground truth or
perception). The skills node implements both over ROS topics; tests implement them directly on the
PyBullet world.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from teachbot.errors import CanceledError, EmergencyStopError, TeachbotError


@dataclass(frozen=True)
class ObjectInfo:
    """Where an object is, as the skills see it (base frame, metres)."""

    name: str
    category: str
    position: np.ndarray
    size: np.ndarray
    yaw: float = 0.0
    supported_by: str = ""


class ArmInterface(Protocol):
    """The controller interface of an arm with a parallel gripper."""

    arm_joints: tuple[str, ...]
    # whether a command reaches the controller as a message (a ROS topic): the arm's clock may then run on before
    # the controller has it, and a simulator running faster than the wall runs on further (see ArmDeadline)
    commands_travel: bool

    def joint_positions(self) -> np.ndarray:
        """Current arm joint positions (radians), in ``arm_joints`` order."""
        ...

    def gripper_width(self) -> float:
        """Current total finger opening (metres)."""
        ...

    def send_trajectory(self, joint_names: tuple[str, ...], times: np.ndarray, positions: np.ndarray) -> None:
        """Start following a trajectory (the current state is the implicit first point)."""
        ...

    def send_gripper(self, width: float, effort: float) -> None:
        ...

    def hold(self) -> None:
        """Stop the arm where it is."""
        ...

    def now(self) -> float:
        """Seconds on the clock the arm's motions run on."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of that clock pass."""
        ...


class ObjectSource(Protocol):
    def objects(self) -> dict[str, ObjectInfo]:
        """The objects known now, by name."""
        ...


class CancelToken:
    """Set by a cancel request or the emergency stop; skills check it between control steps."""

    def __init__(self, poll: Callable[[], bool] | None = None) -> None:
        self._event = threading.Event()
        self._error: TeachbotError | None = None
        self._poll = poll  # e.g. "has the action client asked to cancel?"

    def cancel(self, emergency: bool = False, reason: str = "") -> None:
        """Stop the skill at its next check; ``reason`` replaces 'canceled by request' in its error."""
        if emergency:
            self._error = EmergencyStopError("emergency stop: motion halted; release the stop (publish false) and retry")
        elif self._error is None:
            self._error = CanceledError(reason or "canceled by request")
        self._event.set()

    @property
    def cancelled(self) -> bool:
        if not self._event.is_set() and self._poll is not None and self._poll():
            self.cancel()
        return self._event.is_set()

    def check(self) -> None:
        """Raise the cancel reason when set."""
        if self.cancelled:
            raise self._error or CanceledError("canceled")
