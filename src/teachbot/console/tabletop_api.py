"""The tabletop profile's robot functions (Code-as-Policies API) over the skills and an object list.

ROS-free: ``skills`` is anything with ``call(name, **fields)`` returning a result with ``success``,
``code`` and ``message`` (the SkillClient in the node, a direct library in tests); ``objects``
returns the current object positions by name (perception or the simulator's object list).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from teachbot.errors import ErrorCode
from teachbot.language.dialog import DialogChannel
from teachbot.skills.parameters import call_fields
from teachbot.world.scene import TabletopConfig

# skill error codes that are the caller's mistake: the console shows them as ValueError
ARGUMENT_ERRORS = {ErrorCode.UNKNOWN_OBJECT, ErrorCode.OUT_OF_WORKSPACE, ErrorCode.INVALID_ARGUMENT, ErrorCode.LIMIT_EXCEEDED}


class SkillCaller(Protocol):
    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> Any: ...


class TabletopRobot:
    """Implementations of config/robot_api/tabletop.yaml."""

    def __init__(
        self,
        skills: SkillCaller,
        objects: Callable[[], dict[str, Sequence[float]]],
        dialog: DialogChannel,
        table: TabletopConfig | None = None,
    ) -> None:
        self.skills = skills
        self._objects = objects
        self.dialog = dialog
        self.table = table or TabletopConfig.load()

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {
            "wait_for_trigger": self.dialog.wait_for_trigger,
            "ask": self.dialog.ask,
            "say": self.dialog.say,
            "get_obj_names": self.get_obj_names,
            "get_obj_pos": self.get_obj_pos,
            "denormalize_xy": self.denormalize_xy,
            "put_first_on_second": self.put_first_on_second,
        }

    def get_obj_names(self) -> list[str]:
        return sorted(self._objects())

    def get_obj_pos(self, name: str) -> list[float]:
        if not isinstance(name, str):
            raise TypeError(f"get_obj_pos takes a name, got {type(name).__name__}")
        objects = self._objects()
        if name in objects:
            return [round(float(v), 4) for v in objects[name][:2]]
        if name in self.table.named_points:
            return [float(v) for v in self.table.named_points[name]]
        raise ValueError(
            f"unknown object {name!r}. Use one of get_obj_names() {sorted(objects)} "
            f"or a corner/side: {', '.join(self.table.named_points)}"
        )

    def denormalize_xy(self, pos_normalized: Sequence[float]) -> list[float]:
        if not (isinstance(pos_normalized, (list, tuple)) and len(pos_normalized) == 2):
            raise ValueError("denormalize_xy takes [u, v] with both in [0, 1]")
        (x0, x1), (y0, y1) = self.table.normalized_area["x"], self.table.normalized_area["y"]
        u, v = (float(c) for c in pos_normalized)
        if not (0 <= u <= 1 and 0 <= v <= 1):
            raise ValueError(f"denormalize_xy takes values in [0, 1], got {[u, v]}")
        return [round(x0 + u * (x1 - x0), 4), round(y0 + v * (y1 - y0), 4)]

    def put_first_on_second(self, obj_name: str, target: str | Sequence[float], **parameters: float) -> str:
        """Pick and place; keyword ``parameters`` are the skill's (config/skill_parameters.yaml), checked by the skill."""
        fields: dict[str, Any] = {"object_name": obj_name, **call_fields(parameters)}
        if isinstance(target, str) and target in self.table.named_points and target not in self._objects():
            fields["target_point"] = list(self.table.named_points[target])
        elif isinstance(target, str):
            fields["target_name"] = target
        elif isinstance(target, (list, tuple)) and len(target) >= 2:
            fields["target_point"] = [float(target[0]), float(target[1])]
        else:
            raise ValueError("the target must be an object name, a corner/side name or [x, y]")
        result = self.skills.call("put_first_on_second", **fields)
        if result.success:
            return "success"
        raise (ValueError if ErrorCode(result.code) in ARGUMENT_ERRORS else RuntimeError)(result.message)
