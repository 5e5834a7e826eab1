"""Loopback-only ROS 2 environment: no DDS packet may leave this machine.

Every entry point (CLI, nodes, tests, benchmarks) calls :func:`configure_loopback` before rclpy is
initialised. It sets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, points Fast DDS at the shipped profile
(shared memory plus UDP on 127.0.0.1, no multicast) and, unless the caller chose one, reserves a
ROS_DOMAIN_ID that no other run on this machine holds, so parallel runs cannot cross-talk.

The reservations are lock files in ``<tmp>/teachbot-domains-<uid>``, a directory of this user's with
mode 0700 (:func:`user_directory`): in a directory that every user can write, another user could plant
a link where a lock file is opened and have it truncate a file of ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from pathlib import Path
from typing import IO

from teachbot.paths import config_path

DOMAIN_RANGE = range(1, 101)  # ids whose DDS ports are valid on Linux with many participants
_held_locks: list[IO[str]] = []  # every id this process reserved stays locked until it exits


def fastdds_profile() -> Path:
    """Path of the shipped loopback-only Fast DDS profile."""
    return config_path("fastdds_localhost.xml")


class LockDirectoryError(PermissionError):
    """A lock directory that is not this user's own: teachbot opens no lock file there."""


def user_directory(name: str, base: str | None = None) -> Path:
    """``<base or tmp>/<name>-<uid>``, created with mode 0700: a directory where only this user makes files.

    LockDirectoryError when the path is there but is not a directory owned by this user (a link, another
    user's directory, a file); one of this user's own that others may write to is made 0700 again."""
    directory = Path(base or tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        what = "a link" if stat.S_ISLNK(info.st_mode) else "not a directory" if not stat.S_ISDIR(info.st_mode) else \
            f"owned by another user (uid {info.st_uid})"
        raise LockDirectoryError(
            f"{directory} is {what}; teachbot keeps its lock files only in a directory of your own: remove it, or "
            "set TMPDIR to a directory of yours")
    if info.st_mode & 0o077:
        os.chmod(directory, 0o700)
    return directory


def reserve_domain_id(lock_dir: str | None = None) -> int:
    """Take the first free domain id, held by an flock for the life of this process (lock files in
    :func:`user_directory` under ``lock_dir``, default the temporary directory)."""
    directory = user_directory("teachbot-domains", lock_dir)
    start = os.getpid() % len(DOMAIN_RANGE)  # spread concurrent runs over the range
    ids = list(DOMAIN_RANGE)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    for domain in ids[start:] + ids[:start]:
        handle = os.fdopen(os.open(directory / f"{domain}.lock", flags, 0o600), "r+")  # held until exit
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
