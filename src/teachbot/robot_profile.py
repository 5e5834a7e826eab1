"""Robot profile: everything that differs between one arm and another, read from config/robots/*.yaml.

The sim, the skills and the real-arm drivers all read the same profile, so a real arm needs only a
new profile (URDF, joint names, topic names, limits) and no code change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, require, resolve_config
from teachbot.errors import ConfigError


@dataclass(frozen=True)
class GripperSpec:
    max_width: float
    holding_min_width: float
    effort: float  # newtons when closing, unless a skill asks for another force
    max_effort: float = 0.0  # the most force a skill may ask for (0: effort)

    def __post_init__(self) -> None:
        if self.max_effort <= 0:
            object.__setattr__(self, "max_effort", self.effort)


@dataclass(frozen=True)
class SafetyConfig:
    workspace: dict[str, tuple[float, float]]
    max_speed_factor: float
    default_speed_factor: float
    joint_limit_margin: float


@dataclass(frozen=True)
class SkillConfig:
    approach_height: float
    transport_height: float
    place_clearance: float
    place_tolerance: float
    settle_time: float
    handover_timeout: float
    motion_timeout_margin: float
    position_tolerance: float
    named_poses: dict[str, tuple[float, float, float]]


@dataclass(frozen=True)
class RobotProfile:
    """A robot arm as configured: description, topics, safety limits and skill parameters."""

    name: str
    source: str
    urdf: Path
    base_position: tuple[float, float, float]
    base_rpy: tuple[float, float, float]
    arm_joints: tuple[str, ...]
    finger_joints: tuple[str, ...]
    ee_link: str
    grasp_rpy: tuple[float, float, float]
    home: tuple[float, ...]
    gripper: GripperSpec
    topics: dict[str, str]
    safety: SafetyConfig
    skills: SkillConfig
    stowed: tuple[float, ...] = ()  # arm joints while a mobile base drives (home when empty)
    hands: tuple[str, ...] = ("right",)  # names of the arms' hands, one per arm
    world: str = "tabletop"  # the simulated world this profile belongs to: tabletop or household

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.arm_joints + self.finger_joints

    @classmethod
    def load(cls, name_or_path: str = "panda_sim") -> RobotProfile:
        """Load ``config/robots/<name>.yaml`` (or a path); errors name the file and key."""
        path = resolve_config(name_or_path, "robots")
        raw = load_yaml(path)
        src = str(path)
        robot = require(raw, "robot", src, dict)
        topics = require(raw, "topics", src, dict)
        safety = require(raw, "safety", src, dict)
        skills = require(raw, "skills", src, dict)
        for key in ("joint_trajectory", "joint_states", "gripper_command", "objects", "emergency_stop"):
            require(topics, key, f"{src} topics")
        try:
            gripper = robot["gripper"]
            profile = cls(
                name=str(require(robot, "name", f"{src} robot")),
                source=src,
                urdf=resolve_urdf(str(require(robot, "urdf", f"{src} robot")), src),
                base_position=_vec(robot.get("base_position", [0, 0, 0]), 3),
                base_rpy=_vec(robot.get("base_rpy", [0, 0, 0]), 3),
                arm_joints=tuple(require(robot, "arm_joints", f"{src} robot", list)),
                finger_joints=tuple(robot.get("finger_joints", [])),
                ee_link=str(require(robot, "ee_link", f"{src} robot")),
                grasp_rpy=_vec(robot.get("grasp_rpy", [3.141592653589793, 0, 0]), 3),
                home=tuple(float(v) for v in require(robot, "home", f"{src} robot", list)),
                stowed=tuple(float(v) for v in robot.get("stowed", [])),
                hands=tuple(str(h) for h in robot.get("hands", ["right"])),
                world=str(robot.get("world", "tabletop")),
                gripper=GripperSpec(float(gripper["max_width"]), float(gripper["holding_min_width"]), float(gripper["effort"]),
                                    float(gripper.get("max_effort", 0.0))),
                topics={k: str(v) for k, v in topics.items()},
                safety=SafetyConfig(
                    workspace={a: _vec(safety["workspace"][a], 2) for a in ("x", "y", "z")},  # type: ignore[misc]
                    max_speed_factor=float(safety["max_speed_factor"]),
                    default_speed_factor=float(safety["default_speed_factor"]),
                    joint_limit_margin=float(safety.get("joint_limit_margin", 0.0)),
                ),
                skills=SkillConfig(
                    approach_height=float(skills["approach_height"]),
                    transport_height=float(skills["transport_height"]),
                    place_clearance=float(skills["place_clearance"]),
                    place_tolerance=float(skills["place_tolerance"]),
                    settle_time=float(skills["settle_time"]),
                    handover_timeout=float(skills["handover_timeout"]),
                    motion_timeout_margin=float(skills["motion_timeout_margin"]),
                    position_tolerance=float(skills["position_tolerance"]),
                    named_poses={k: _vec(v, 3) for k, v in skills.get("named_poses", {}).items()},  # type: ignore[misc]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{src}: malformed robot profile ({exc!r}); compare with config/robots/panda_sim.yaml") from None
        if len(profile.home) != len(profile.arm_joints):
            raise ConfigError(f"{src}: robot.home has {len(profile.home)} values for {len(profile.arm_joints)} arm joints")
        if profile.stowed and len(profile.stowed) != len(profile.arm_joints):
            raise ConfigError(f"{src}: robot.stowed has {len(profile.stowed)} values for {len(profile.arm_joints)} arm joints")
        if profile.world not in ("tabletop", "household"):
            raise ConfigError(f"{src}: robot.world must be tabletop or household, got {profile.world!r}")
        if profile.gripper.max_effort < profile.gripper.effort:
            raise ConfigError(f"{src}: robot.gripper.max_effort must be at least gripper.effort")
        if not 0 < profile.safety.default_speed_factor <= profile.safety.max_speed_factor:
            raise ConfigError(f"{src}: safety.default_speed_factor must be in (0, max_speed_factor]")
        return profile


def resolve_urdf(value: str, source: str) -> Path:
    """Resolve ``pybullet_data:<rel>`` or a path; a missing file is a ConfigError naming the key."""
    if value.startswith("pybullet_data:"):
        try:
            import pybullet_data  # deferred: pybullet (optional here)
        except ImportError:
            raise ConfigError(f"{source}: robot.urdf uses pybullet_data but pybullet is not installed; run `make setup`") from None
        path = Path(pybullet_data.getDataPath()) / value.split(":", 1)[1]
    else:
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = Path(source).parent / path
    if not path.is_file():
        raise ConfigError(f"URDF not found: {path} (robot.urdf in {source}); fix the path or install the robot description")
    return path


def _vec(value: Any, n: int) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise ValueError(f"expected {n} numbers, got {value!r}")
    return tuple(float(v) for v in value)
