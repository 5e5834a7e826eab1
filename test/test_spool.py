"""The one spool of the fleet memory (teachbot.storage.spool), for both kinds it queues: lessons and knowledge entries.

No database: the spool is files. What it promises: an item written is read back whole with its robot and scope,
oldest first; a file that cannot be read (torn JSON, wrong scope, a name that is not its id, an invalid lesson)
is moved to quarantine/ and never deleted; a temp file a killed writer left is swept once stale, not while young;
``done`` and ``reject`` take an item out. A transient error (too many open files, a file made unreadable for a while)
leaves the file in the spool to be tried again, and a lesson whose file is in place is stored even when the
directory's fsync failed (issue 31, item 9).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pytest

from teachbot.errors import MemoryStoreError
from teachbot.knowledge import KnowledgeEntry, KnowledgeError
from teachbot.knowledge.pg_store import ENTRIES
from teachbot.memory import InteractionExample
from teachbot.memory.pg_store import LESSONS
from teachbot.storage import files
from teachbot.storage.spool import Spool


def lesson(example_id: str, created: str, text: str = "put the red block in the bowl") -> InteractionExample:
    transcript = "\n".join([">>> wait_for_trigger()", repr({"type": "dialog", "text": text}), ">>> say('done')"])
    return InteractionExample(id=example_id, profile="tabletop", transcript=transcript, created=created)


def test_lessons_round_trip_oldest_first_with_robot_and_scope(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", LESSONS)
    spool.put(lesson("later", "2026-01-02T00:00:00.000+00:00"), "arm-1", "robot")
    spool.put(lesson("earlier", "2026-01-01T00:00:00.000+00:00", "stack the blocks"), "arm-2", "fleet")
    items = spool.items()
    assert [(s.item.id, s.robot_id, s.shared) for s in items] == [("earlier", "arm-2", "fleet"), ("later", "arm-1", "robot")]
    assert items[0].item.instructions == ("stack the blocks",)  # derived on reading, as the stores hold them
    assert spool.ids() == {"earlier", "later"}
    spool.done("earlier")
    spool.done("earlier")  # twice: already gone is fine
    assert spool.ids() == {"later"} and spool.load("earlier") is None


def test_entries_round_trip_and_a_conflict_is_set_aside(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", ENTRIES)
    entry = KnowledgeEntry(id="blue-cup", kind="preference", text="The person likes the blue cup.")
    spool.put(entry, "arm-1", "fleet")
    loaded = spool.load("blue-cup")
    assert loaded is not None and loaded.item == entry and (loaded.robot_id, loaded.shared) == ("arm-1", "fleet")
    spool.reject("blue-cup", "the database holds another entry under this id")
    assert spool.ids() == set() and [p.name.split(".")[0] for p in spool.quarantine_dir.iterdir()] == ["blue-cup"]


@pytest.mark.parametrize(("name", "content"), [
    ("torn.json", '{"example": {"id": "torn"'),
    ("scope.json", '{"example": null, "robot_id": "arm-1", "shared": "everyone"}'),
    ("elsewhere.json", None),  # a valid record under another id's name
    ("empty.json", '{"example": {"id": "empty", "profile": "tabletop", "transcript": ""}, "robot_id": "a", "shared": "fleet"}'),
])
def test_unreadable_files_are_quarantined_never_deleted(tmp_path: Path, name: str, content: str | None) -> None:
    spool = Spool(tmp_path / "spool", LESSONS)
    if content is None:
        spool.put(lesson("right", "2026-01-01T00:00:00.000+00:00"), "arm-1", "fleet")
        os.replace(spool.directory / "right.json", spool.directory / name)
    else:
        (spool.directory / name).write_text(content)
    original = (spool.directory / name).read_text()
    spool.put(lesson("good", "2026-01-01T00:00:00.000+00:00"), "arm-1", "fleet")
    assert [s.item.id for s in spool.items()] == ["good"]
    moved = list(spool.quarantine_dir.iterdir())
    assert [p.name.rsplit(".", 1)[0] for p in moved] == [name]
    assert moved[0].read_text() == original  # moved as it was


def test_stale_temp_files_are_swept_young_ones_left(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", ENTRIES, stale_temp_seconds=60.0)
    young, old = spool.directory / ".a.json.x.tmp", spool.directory / ".b.json.y.tmp"
    young.write_text("{")
    old.write_text("{")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert spool.items() == []
    assert young.exists() and not old.exists()
    assert [p.name.startswith("b.json.y.tmp") for p in spool.quarantine_dir.iterdir()] == [True]


def test_errors_name_the_kind_and_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(MemoryStoreError, match="memory spool directory .*memory.store.spool_dir"):
        Spool(blocker / "spool", LESSONS)
    with pytest.raises(KnowledgeError, match="knowledge spool directory"):
        Spool(blocker / "spool", ENTRIES)


def _failing_reads(monkeypatch: pytest.MonkeyPatch, error: OSError, only: Path | None = None) -> None:
    """Reading a spool file (``only``, or any) raises ``error``, as an exhausted process or a revoked permission would."""
    read_text = Path.read_text

    def read(path: Path, *args: object, **kwargs: object) -> str:
        if path.suffix == ".json" and (only is None or path == only):
            raise error
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read)


def test_too_many_open_files_leaves_the_lesson_in_the_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = Spool(tmp_path / "spool", LESSONS)
    spool.put(lesson("kept", "2026-01-01T00:00:00.000+00:00"), "arm-1", "fleet")
    with monkeypatch.context() as patch:
        _failing_reads(patch, OSError(errno.EMFILE, "Too many open files"))
        assert spool.items() == [] and spool.load("kept") is None
        assert spool.deferred == {"kept"}  # to be tried again
    assert spool.ids() == {"kept"} and not spool.quarantine_dir.exists()
    assert [s.item.id for s in spool.items()] == ["kept"] and spool.deferred == set()  # read once the error is gone


def test_an_unreadable_file_stays_until_it_is_readable_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = Spool(tmp_path / "spool", LESSONS)
    spool.put(lesson("locked", "2026-01-01T00:00:00.000+00:00"), "arm-1", "fleet")
    path = spool.directory / "locked.json"
    path.chmod(0)
    try:
        with monkeypatch.context() as patch:
            if os.geteuid() == 0:  # root reads a mode-000 file anyway: refuse it as for any other user
                _failing_reads(patch, PermissionError(errno.EACCES, "Permission denied"), only=path)
            assert spool.items() == [] and spool.deferred == {"locked"}
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert not spool.quarantine_dir.exists()
    assert [s.item.id for s in spool.items()] == ["locked"]


def test_a_failed_directory_fsync_does_not_lose_a_lesson_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = Spool(tmp_path / "spool", LESSONS)

    def fsync_fails(directory: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files, "fsync_dir", fsync_fails)
    spool.put(lesson("on-disk", "2026-01-01T00:00:00.000+00:00"), "arm-1", "fleet")  # stored: no "not stored" error
    assert [s.item.id for s in spool.items()] == ["on-disk"]
    spool.done("on-disk")  # deleting it with the fsync failing is no error either
    assert spool.ids() == set()
