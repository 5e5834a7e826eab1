"""Bad input at start-up: one clear line naming the fix, never a traceback or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.errors import ConfigError
from teachbot.robot_profile import RobotProfile
from teachbot.ros_env import reserve_domain_id

ROOT = Path(__file__).resolve().parents[1]
SIM_PROFILE = ROOT / "config" / "robots" / "panda_sim.yaml"


def bad_profile(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "robot.yaml"
    path.write_text(SIM_PROFILE.read_text().replace(old, new))
    return path


def test_missing_urdf_names_the_key_and_file(tmp_path):
    path = bad_profile(tmp_path, "pybullet_data:franka_panda/panda.urdf", "/nowhere/arm.urdf")
    with pytest.raises(ConfigError, match=r"URDF not found: /nowhere/arm.urdf \(robot.urdf in .*robot.yaml\)"):
        RobotProfile.load(str(path))


def test_profile_with_wrong_home_length(tmp_path):
    path = bad_profile(tmp_path, "home: [0.0, -0.4, 0.0, -2.2, 0.0, 1.8, 0.7853981633974483]", "home: [0.0, 1.0]")
    with pytest.raises(ConfigError, match="robot.home has 2 values for 7 arm joints"):
        RobotProfile.load(str(path))


def test_unknown_profile_name():
    with pytest.raises(ConfigError, match="config file not found: .*robots/ur5.yaml"):
        RobotProfile.load("ur5")


def test_node_started_with_a_bad_profile_exits_with_one_line(tmp_path):
    path = bad_profile(tmp_path, "pybullet_data:franka_panda/panda.urdf", "/nowhere/arm.urdf")
    # a domain of its own: this test process may run a /skills node already
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "ROS_DOMAIN_ID": str(reserve_domain_id())}
    proc = subprocess.run(
        [sys.executable, "-m", "teachbot.nodes.skills_node", "--ros-args", "-p", f"robot_profile:={path}"],
        capture_output=True, text=True, timeout=pytest_timeout(60), env=env,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: URDF not found: /nowhere/arm.urdf (robot.urdf in {path}); fix the path or install the robot description"]
    assert "Traceback" not in proc.stderr


def test_a_node_started_twice_is_refused(ros_context):
    from teachbot.nodes.common import DuplicateNodeError
    from teachbot.nodes.skills_node import SkillsNode

    first = SkillsNode(namespace="/twice")
    try:
        with pytest.raises(DuplicateNodeError, match=r"a node named /twice/skills is already running in ROS_DOMAIN_ID=\d+"):
            SkillsNode(namespace="/twice")
    finally:
        first.destroy_node()
