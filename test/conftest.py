"""Shared fixtures. The loopback-only DDS environment and a private ROS_DOMAIN_ID are set at import,
before any test initialises rclpy, so test runs never talk to the network or to each other."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from teachbot.ros_env import configure_loopback  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # an xdist worker inherits the domain the controller reserved: each worker's session stack needs its own
    os.environ.pop("ROS_DOMAIN_ID", None)
configure_loopback()
# episode traces (config/tracing.yaml) of this test process and the nodes it starts go to a folder of its own,
# never into the user's run directory; test_tracing reads them back from here
os.environ.setdefault("TEACHBOT_TRACE_DIR", tempfile.mkdtemp(prefix="teachbot-traces-"))


@pytest.fixture(scope="session")
def profile():
    from teachbot.robot_profile import RobotProfile

    return RobotProfile.load("panda_sim")


@pytest.fixture(scope="session")
def tabletop():
    from teachbot.world.scene import TabletopConfig

    return TabletopConfig.load()


@pytest.fixture(scope="module")
def world(profile, tabletop):
    from teachbot.sim.world import TabletopWorld

    w = TabletopWorld(profile, tabletop)
    yield w
    w.close()


@pytest.fixture(scope="module")
def household_world():
    """A household world (the kitchen without a scene yet), one per test module."""
    from teachbot.robot_profile import RobotProfile
    from teachbot.sim.household_world import HouseholdWorld

    w = HouseholdWorld(RobotProfile.load("household_sim"))
    yield w
    w.close()


@pytest.fixture()
def kitchen(household_world):
    """The household world reset to the default kitchen (config/household/scenes/kitchen.yaml)."""
    from teachbot.world.household_scene import load_household_scene

    household_world.reset(load_household_scene())
    return household_world


@pytest.fixture(scope="session")
def ros_context():
    import rclpy

    rclpy.init()
    yield
    rclpy.shutdown()


@pytest.fixture(scope="session")
def stack(ros_context):
    """sim + skills nodes in this process, physics as fast as possible, camera off."""
    from timing import timeout

    from teachbot.nodes.stack import InProcessStack

    s = InProcessStack(real_time_factor=0.0, camera_enabled=False)
    s.start(wait=timeout(60.0))
    yield s
    s.stop()


@pytest.fixture()
def client(stack):
    """The stack's skill client with the e-stop released and the arm at home."""
    c = stack.client
    c.emergency_stop(False)
    return c


@pytest.fixture()
def sim_camera(stack):
    """The shared stack's sim node with its RGB-D camera publishing, for one test (the stack starts with
    it off for speed). The sim re-arms its publication timers on a scene reset, so reset the scene
    after requesting this fixture. Yields the sim node."""
    sim = stack.node("sim")
    sim.periods["camera"] = 1.0 / sim.camera.rate
    yield sim
    sim.periods["camera"] = float("inf")


def pytest_configure(config):
    """Markers of this suite: ``slow`` runs (e.g. 50 expert scenes per template) are opt-in."""
    config.addinivalue_line("markers", "slow: long runs (50 expert scenes per template, more repetitions of a "
                                       "scenario make test covers once); select with make test-slow, -m slow "
                                       "or TEACHBOT_SLOW_TESTS=1")


def slow_tests_selected(config) -> bool:
    """Whether this run asked for the opt-in ``slow`` tests (``-m slow`` or TEACHBOT_SLOW_TESTS=1)."""
    return "slow" in (config.option.markexpr or "") or os.environ.get("TEACHBOT_SLOW_TESTS") == "1"


def scheduled_first() -> dict[str, int]:
    """The slowest test files, longest first, from test/schedule.txt (tools/test_durations.py writes it)."""
    path = ROOT / "test" / "schedule.txt"
    if not path.is_file():
        return {}
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {name: rank for rank, name in enumerate(line for line in lines if line)}


def pytest_collection_modifyitems(config, items):
    """Skip the ``slow`` tests unless asked for, before their fixtures start a stack or a world; then put the
    slowest files first (each file's tests stay together and in order), so that the test workers, which get
    whole files in this order (tools/run_tests.sh: --dist loadfile --no-loadscope-reorder), end together."""
    if not slow_tests_selected(config):
        skip = pytest.mark.skip(reason="opt-in slow test: run make test-slow (or -m slow, TEACHBOT_SLOW_TESTS=1)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
    rank = scheduled_first()
    last = len(rank)
    items.sort(key=lambda item: rank.get(Path(str(item.path)).relative_to(ROOT).as_posix(), last))
