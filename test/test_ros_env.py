"""Unit tests of teachbot.ros_env: the loopback-only DDS profile and environment, domain-id locks.

tools/prove_loopback.sh is the end-to-end counterpart (packet capture while nodes talk); these
tests pin the configuration it relies on and run without rclpy.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from timing import timeout

from teachbot import ros_env

NS = {"dds": "http://www.eprosima.com"}
LOOPBACK = "127.0.0.1"

# Holds one domain-id lock in a separate process until stdin closes (or it is killed).
HOLDER = """
import sys
from teachbot.ros_env import reserve_domain_id
print(reserve_domain_id(sys.argv[1]), flush=True)
sys.stdin.read()
"""


@pytest.fixture
def profile() -> ET.Element:
    """Root element of the shipped Fast DDS profile."""
    path = ros_env.fastdds_profile()
    assert path.is_file(), path
    return ET.parse(path).getroot()


@pytest.fixture
def own_lock() -> Iterator[None]:
    """Release the domain ids a test reserves in-process, keeping the ones held before it.

    reserve_domain_id keeps every lock it takes for the life of the process (conftest holds this
    run's id that way); a test's extra reservations are closed again so they do not pile up.
    """
    before = len(ros_env._held_locks)
    yield
    while len(ros_env._held_locks) > before:
        ros_env._held_locks.pop().close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A child process holding one domain id under ``tmp_path``, and that id."""
    src = str(Path(ros_env.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip().isdigit(), f"holder printed {line!r}"
    yield child, int(line)
    if child.poll() is None:
        child.kill()
    child.wait(timeout=timeout(10))


# --- the Fast DDS profile ----------------------------------------------------------------------


def test_profile_defines_only_shm_and_loopback_udp(profile: ET.Element) -> None:
    """Two transports: shared memory, and UDPv4 white-listed to 127.0.0.1 only."""
    descriptors = profile.findall("dds:profiles/dds:transport_descriptors/dds:transport_descriptor", NS)
    kinds = {d.findtext("dds:transport_id", namespaces=NS): d.findtext("dds:type", namespaces=NS)
             for d in descriptors}
    assert sorted(kinds.values()) == ["SHM", "UDPv4"]
    for descriptor in descriptors:
        if descriptor.findtext("dds:type", namespaces=NS) == "UDPv4":
            allowed = [(a.text or "").strip()
                       for a in descriptor.findall("dds:interfaceWhiteList/dds:address", NS)]
            assert allowed == [LOOPBACK]


def test_default_participant_uses_only_those_transports(profile: ET.Element) -> None:
    """The default participant profile disables the built-in (all-interface, multicast) transports."""
    participants = profile.findall("dds:profiles/dds:participant", NS)
    defaults = [p for p in participants if p.get("is_default_profile") == "true"]
    assert len(defaults) == 1
    rtps = defaults[0].find("dds:rtps", NS)
    assert rtps is not None
    assert (rtps.findtext("dds:useBuiltinTransports", namespaces=NS) or "").strip() == "false"
    declared = {d.findtext("dds:transport_id", namespaces=NS)
                for d in profile.findall(".//dds:transport_descriptor", NS)}
    used = {(t.text or "").strip() for t in rtps.findall("dds:userTransports/dds:transport_id", NS)}
    assert used == declared


def test_profile_has_no_multicast_and_only_loopback_locators(profile: ET.Element) -> None:
    """No multicast locator lists anywhere; every address named is 127.0.0.1."""
    for element in profile.iter():
        tag = element.tag.split("}")[-1]
        assert "multicast" not in tag.lower(), tag
    addresses = [(a.text or "").strip() for a in profile.iter("{http://www.eprosima.com}address")]
    assert addresses and set(addresses) == {LOOPBACK}


def test_shell_env_uses_the_same_profile() -> None:
    """tools/loopback_env.sh (used by run_tests.sh, make demo/bench) mirrors configure_loopback."""
    root = Path(__file__).resolve().parents[1]
    script = f"source {root / 'tools' / 'loopback_env.sh'}; env"
    clean_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ROS_STATIC_PEERS": "10.0.0.1"}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env=clean_env)
    shell_env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    expected = ros_env.configure_loopback({}, reserve_domain=False)
    for key, value in expected.items():
        if key == "FASTDDS_DEFAULT_PROFILES_FILE":
            assert Path(shell_env[key]).resolve() == Path(value).resolve()
        else:
            assert shell_env[key] == value, key
    assert "ROS_STATIC_PEERS" not in shell_env
    assert "ROS_DOMAIN_ID" not in shell_env  # left to conftest / the entry points


# --- configure_loopback ------------------------------------------------------------------------


def test_configure_loopback_sets_variables_on_a_dict() -> None:
    """A given mapping is filled in and returned; os.environ is left alone."""
    before = dict(os.environ)
    env: dict[str, str] = {}
    result = ros_env.configure_loopback(env, reserve_domain=False)
    assert result is env
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert env["RMW_IMPLEMENTATION"] == "rmw_fastrtps_cpp"
    assert Path(env["FASTDDS_DEFAULT_PROFILES_FILE"]) == ros_env.fastdds_profile()
    assert "ROS_DOMAIN_ID" not in env
    assert dict(os.environ) == before


def test_configure_loopback_overrides_wider_discovery() -> None:
    """A user's SUBNET range or static peers cannot widen discovery beyond this machine."""
    env = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "ROS_STATIC_PEERS": "192.168.1.7"}
    ros_env.configure_loopback(env, reserve_domain=False)
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert "ROS_STATIC_PEERS" not in env


def test_configure_loopback_keeps_user_domain_id(own_lock: None) -> None:
    """An explicit ROS_DOMAIN_ID wins over reservation (and no lock is taken)."""
    held = len(ros_env._held_locks)
    env = {"ROS_DOMAIN_ID": "42"}
    ros_env.configure_loopback(env)
    assert env["ROS_DOMAIN_ID"] == "42"
    assert len(ros_env._held_locks) == held


def test_configure_loopback_reserves_a_domain_when_unset(
    own_lock: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ROS_DOMAIN_ID, a free id in DOMAIN_RANGE is reserved and written to the mapping."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    env: dict[str, str] = {}
    ros_env.configure_loopback(env)
    domain = int(env["ROS_DOMAIN_ID"])
    assert domain in ros_env.DOMAIN_RANGE
    assert (tmp_path / f"teachbot-domains-{os.getuid()}" / f"{domain}.lock").is_file()


# --- the lock directory (issue 31, item 10) ----------------------------------------------------


def test_the_domain_locks_live_in_a_directory_of_this_users_own(own_lock: None, tmp_path: Path) -> None:
    """Created with mode 0700 under the user's id; a lock file in it is this user's and not world-readable."""
    domain = ros_env.reserve_domain_id(str(tmp_path))
    directory = tmp_path / f"teachbot-domains-{os.getuid()}"
    info = directory.lstat()
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    assert stat.S_IMODE((directory / f"{domain}.lock").stat().st_mode) & 0o077 == 0
    directory.chmod(0o777)  # this user's own, left open: closed again, not refused
    ros_env.reserve_domain_id(str(tmp_path))
    assert stat.S_IMODE(directory.lstat().st_mode) == 0o700


def test_a_lock_directory_of_another_user_is_refused(own_lock: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's directory in its place (made first, to plant links to our files): refused, nothing opened."""
    if os.geteuid() == 0:  # as root: a directory that really is another user's
        theirs = tmp_path / f"teachbot-domains-{os.getuid()}"
        theirs.mkdir(mode=0o777)
        os.chown(theirs, 65534, 65534)
    else:  # as a user: ours looks like another user's to a process of another uid
        (tmp_path / f"teachbot-domains-{os.getuid() + 1}").mkdir(mode=0o777)
        monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
        theirs = tmp_path / f"teachbot-domains-{os.getuid()}"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (theirs / "1.lock").symlink_to(victim)
    held = len(ros_env._held_locks)
    with pytest.raises(ros_env.LockDirectoryError, match=r"is owned by another user \(uid \d+\); teachbot keeps its lock "
                       r"files only in a directory of your own: remove it, or set TMPDIR"):
        ros_env.reserve_domain_id(str(tmp_path))
    assert len(ros_env._held_locks) == held and victim.read_text() == "keep me"


def test_a_link_in_place_of_the_lock_directory_is_refused(own_lock: None, tmp_path: Path) -> None:
    """A link where the directory should be (even to a directory of ours) is refused, not followed."""
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / f"teachbot-domains-{os.getuid()}").symlink_to(target)
    with pytest.raises(ros_env.LockDirectoryError, match="is a link"):
        ros_env.reserve_domain_id(str(tmp_path))
    assert list(target.iterdir()) == []


# --- reserve_domain_id -------------------------------------------------------------------------


def test_two_holders_get_distinct_ids(
    own_lock: None, holder: tuple[subprocess.Popen[str], int], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second process starting its search at the same id skips the one the first holds."""
    child, theirs = holder
    monkeypatch.setattr(os, "getpid", lambda: child.pid)  # same start index as the holder
    mine = ros_env.reserve_domain_id(str(tmp_path))
    assert theirs in ros_env.DOMAIN_RANGE
    assert mine in ros_env.DOMAIN_RANGE
    assert mine != theirs
    # A second reservation in the same process keeps the first one locked as well.
    again = ros_env.reserve_domain_id(str(tmp_path))
    assert again not in (mine, theirs)


def test_lock_is_released_when_holder_dies(
    own_lock: None, holder: tuple[subprocess.Popen[str], int], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flock dies with its process, even on SIGKILL: no stale reservations after a crash."""
    child, theirs = holder
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=timeout(10))
    monkeypatch.setattr(os, "getpid", lambda: child.pid)
    assert ros_env.reserve_domain_id(str(tmp_path)) == theirs
