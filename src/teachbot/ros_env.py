"""Loopback-only ROS 2 environment: no DDS packet may leave this machine.

Every entry point (CLI, nodes, tests, benchmarks) calls :func:`configure_loopback` before rclpy is
initialised. It sets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, points Fast DDS at the shipped profile
(shared memory plus UDP on 127.0.0.1, no multicast) and, unless the caller chose one, reserves a
ROS_DOMAIN_ID that no other run on this machine holds, so parallel runs cannot cross-talk.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

from teachbot.paths import config_path

DOMAIN_RANGE = range(1, 101)  # ids whose DDS ports are valid on Linux with many participants
_held_locks: list[IO[str]] = []  # every id this process reserved stays locked until it exits


def fastdds_profile() -> Path:
    """Path of the shipped loopback-only Fast DDS profile."""
    return config_path("fastdds_localhost.xml")


def reserve_domain_id(lock_dir: str | None = None) -> int:
    """Take the first free domain id, held by an flock for the life of this process."""
    directory = Path(lock_dir or tempfile.gettempdir()) / "teachbot-domains"
    directory.mkdir(parents=True, exist_ok=True)
    start = os.getpid() % len(DOMAIN_RANGE)  # spread concurrent runs over the range
    ids = list(DOMAIN_RANGE)
    for domain in ids[start:] + ids[:start]:
        handle = open(directory / f"{domain}.lock", "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held_locks.append(handle)
        return domain
    raise RuntimeError(
        f"no free ROS_DOMAIN_ID in {DOMAIN_RANGE.start}..{DOMAIN_RANGE.stop - 1}; "
        f"stop other teachbot runs or set ROS_DOMAIN_ID yourself"
    )


def configure_loopback(environ: dict[str, str] | None = None, reserve_domain: bool = True) -> dict[str, str]:
    """Set the loopback-only DDS variables in ``environ`` (default: this process) and return it.

    Values the user already set are kept, except that a profile file and the discovery range are
    always present. Must run before rclpy.init() in this process.
    """
    env = os.environ if environ is None else environ
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(fastdds_profile()))
    env.pop("ROS_STATIC_PEERS", None)
    if reserve_domain and not env.get("ROS_DOMAIN_ID"):
        env["ROS_DOMAIN_ID"] = str(reserve_domain_id())
    return env  # type: ignore[return-value]
