"""The node name locks' directory (issue 31, item 10): only a directory of this user's, mode 0700.

Another user on the machine can make ``<tmp>/teachbot-nodes-<uid>`` first, or a link in its place, or (while
the directory was open to others) plant a link where a lock file is opened: taking the lock then truncated
the file the link points at. Each is refused with a LockDirectoryError that says what to remove; nothing
outside the directory is opened. No ROS graph is needed: the locks are plain files.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from teachbot.nodes.common import LOCK_ROOT, NodeNameLock, lock_directory
from teachbot.ros_env import LockDirectoryError


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of the test's own in place of the system's."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def mine(tmp: Path) -> Path:
    """Where this user's lock directory belongs under ``tmp``."""
    return tmp / f"{LOCK_ROOT}-{os.getuid()}"


def test_the_directory_is_made_0700_and_a_lock_works_there(tmp: Path) -> None:
    """Made with mode 0700 under the user's id; a lock file in it is this user's, 0600, and locks."""
    lock = NodeNameLock(7, "/robot_1/sim")
    try:
        info = mine(tmp).lstat()
        assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
        assert lock.path.parent == mine(tmp)
        assert stat.S_IMODE(lock.path.stat().st_mode) == 0o600
        assert lock.acquire() and lock.holder() == "this process"
    finally:
        lock.release()


def test_a_directory_of_ours_open_to_others_is_closed_again(tmp: Path) -> None:
    """This user's own directory left writable by all is made 0700 before a lock file is opened in it."""
    mine(tmp).mkdir(mode=0o700)
    mine(tmp).chmod(0o777)
    assert lock_directory() == mine(tmp)
    assert stat.S_IMODE(mine(tmp).lstat().st_mode) == 0o700


def test_a_link_in_place_of_the_directory_is_refused_not_followed(tmp: Path) -> None:
    """A link where the directory should be (even to a directory of ours) is refused; nothing is made there."""
    target = tmp / "elsewhere"
    target.mkdir(mode=0o700)
    mine(tmp).symlink_to(target)
    with pytest.raises(LockDirectoryError, match=r"is a link; teachbot keeps its lock files only in a directory of "
                       r"your own: remove it, or set TMPDIR"):
        NodeNameLock(7, "/robot_1/sim")
    assert list(target.iterdir()) == []


def test_a_directory_of_another_user_is_refused(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's directory in its place (made first, to plant links to our files): refused, nothing opened."""
    if os.geteuid() == 0:  # as root: a directory that really is another user's
        theirs = mine(tmp)
        theirs.mkdir(mode=0o777)
        os.chown(theirs, 65534, 65534)
    else:  # as a user: ours looks like another user's to a process of another uid
        (tmp / f"{LOCK_ROOT}-{os.getuid() + 1}").mkdir(mode=0o777)
        monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
        theirs = mine(tmp)
    victim = tmp / "victim.txt"
    victim.write_text("keep me")
    (theirs / "domain7.robot_1.sim.lock").symlink_to(victim)
    with pytest.raises(LockDirectoryError, match=r"is owned by another user \(uid \d+\); teachbot keeps its lock files"):
        NodeNameLock(7, "/robot_1/sim")
    assert victim.read_text() == "keep me"


def test_a_link_planted_where_a_lock_file_is_opened_is_refused(tmp: Path) -> None:
    """A link left in the directory while it was open to others: refused; the file it points at keeps its text."""
    mine(tmp).mkdir(mode=0o777)
    victim = tmp / "victim.txt"
    victim.write_text("keep me")
    (mine(tmp) / "domain7.robot_1.sim.lock").symlink_to(victim)
    with pytest.raises(LockDirectoryError, match=r"domain7\.robot_1\.sim\.lock is a link; teachbot opens no lock file "
                       r"through a link: remove it"):
        lock = NodeNameLock(7, "/robot_1/sim")
        lock.acquire()  # the old code got here and truncated the victim
    assert victim.read_text() == "keep me"


def test_a_hard_link_planted_where_a_lock_file_is_opened_is_refused(tmp: Path) -> None:
    """A hard link to another of this user's files is not a lock file either: refused, the file untouched."""
    mine(tmp).mkdir(mode=0o777)
    victim = tmp / "victim.txt"
    victim.write_text("keep me")
    os.link(victim, mine(tmp) / "domain7.robot_1.sim.lock")
    with pytest.raises(LockDirectoryError, match=r"is a hard link to another file; teachbot takes its locks only on "
                       r"files of its own: remove it"):
        lock = NodeNameLock(7, "/robot_1/sim")
        lock.acquire()
    assert victim.read_text() == "keep me"
