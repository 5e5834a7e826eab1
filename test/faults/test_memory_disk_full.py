"""The memory stores on a full disk (issue 15, fault injection): a real 1 MiB tmpfs is filled, then the
episodic memory, the knowledge base and the task log are asked to store more.

Each must refuse with an error that says the disk is full and what to do (a TeachbotError: what the
memory node answers as ``success: false`` instead of dying), including when the write had already
started (the record is bigger than the room left, so part of it reached the disk); everything stored
before must read back byte for byte, in the same object and in a new one opened on the directory, with
no temp file or torn line left behind; and once space is freed, storing works again.

Mounting needs root (CAP_SYS_ADMIN): elsewhere the tests are skipped, saying so."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.errors import MemoryStoreError, TeachbotError
from teachbot.knowledge.entry import KnowledgeEntry, KnowledgeError
from teachbot.knowledge.store import KnowledgeStore
from teachbot.memory.embedding import cached
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import LEARNED, InteractionExample
from teachbot.memory.store import MemoryStore
from teachbot.taskmemory.log import TaskLogError, TaskLogStore

pytestmark = pytest.mark.timeout(pytest_timeout(60))

ROOM = 8192  # bytes left free before the big write: less than it needs, so it starts and fails


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for this test (unmounted after it, whatever happened)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("filling a real disk needs a 1 MiB tmpfs, and mounting one needs root (CAP_SYS_ADMIN)")
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if run.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({run.stderr.strip() or run.returncode})")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)  # a file still open: detach it now


def fill(disk: Path, room: int = 0) -> Path:
    """Fill ``disk`` with one file, then give ``room`` bytes back; returns the file (delete it to free the disk)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == 28, exc  # ENOSPC: the disk is full
    finally:
        os.close(fd)
    if room:
        os.truncate(filler, max(0, filler.stat().st_size - room))
    return filler


def files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (temp files, quarantine and lock included) with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_clear(message: str, directory: Path, key: str) -> None:
    assert f"the disk holding {directory} is full (No space left on device)" in message, message
    assert "it was not stored and nothing stored before was changed" in message
    assert f"Free space on that disk, or set {key} in config/memory.yaml to another disk" in message


class HashEmbedder:
    """Deterministic unit vectors (retrieval bookkeeping needs no semantics here)."""

    name = "hash-16"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little") for t in texts]
        rows = np.array([np.random.default_rng(s).normal(size=16) for s in seeds], dtype=np.float32).reshape(len(texts), 16)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def example(words: str, pad: int = 0) -> InteractionExample:
    transcript = f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': {words!r}}}\n>>> say('done')"
    return InteractionExample(profile="tabletop", transcript=transcript + (f"\n# {'x' * pad}" if pad else ""))


def test_episodic_memory_on_a_full_disk_refuses_clearly_and_keeps_every_example(disk: Path) -> None:
    learned = disk / "learned"
    memory = EpisodicMemory(MemoryStore(learned), HashEmbedder())
    ids = [memory.add(example(f"put block {i} in the bowl")) for i in range(20)]
    before, on_disk = {e.id: e for e in memory.store.list(source=LEARNED)}, files(learned)
    filler = fill(disk, ROOM)
    big = example("stack every block", pad=40_000)  # starts to be written, then the disk is full
    with pytest.raises(MemoryStoreError) as started:
        memory.add(big)
    assert isinstance(started.value, TeachbotError)  # the memory node answers it as success: false
    assert_clear(str(started.value), learned, "memory.store.learned_dir")
    fill(disk)
    with pytest.raises(MemoryStoreError) as none:  # not a byte of room
        memory.add(example("one more"))
    assert_clear(str(none.value), learned, "memory.store.learned_dir")

    assert files(learned) == on_disk  # byte for byte: no temp file, no quarantine, nothing changed
    assert {e.id: e for e in memory.store.list(source=LEARNED)} == before and sorted(before) == sorted(ids)
    assert {e.id: e for e in MemoryStore(learned).list(source=LEARNED)} == before  # a new instance reads them all
    found = memory.retrieve(["put block 7 in the bowl"], k=3)  # the index holds what the store holds: most similar last
    assert found[-1].example.instructions == ("put block 7 in the bowl",) and {r.example.id for r in found} <= set(before)

    filler.unlink()  # space again: the same example is stored, and everything is there
    stored = memory.add(big)
    assert {e.id for e in MemoryStore(learned).list(source=LEARNED)} == set(before) | {stored}


def test_retrieval_with_the_embedding_cache_on_a_full_disk_still_answers(disk: Path) -> None:
    memory = EpisodicMemory(MemoryStore(disk / "learned"), cached(HashEmbedder(), disk / ".embedding_cache"))
    memory.add(example("put the red block in the bowl"))
    fill(disk)
    cache = disk / ".embedding_cache"
    before = {p.name: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    for i in range(64):  # new texts: the cache appends a record each, past its file's last page
        assert memory.retrieve([f"a request never heard before, number {i}"], k=1)
    after = {p.name: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    # what was cached before is still there byte for byte (a cut record would be a torn tail)
    assert all(after[name].startswith(data) for name, data in before.items() if name in after), sorted(after)


def test_the_knowledge_base_on_a_full_disk_refuses_clearly_and_keeps_every_entry(disk: Path) -> None:
    directory = disk / "knowledge"
    store = KnowledgeStore(directory)
    for i in range(20):
        store.add(KnowledgeEntry(kind="preference", text=f"The person likes cup {i}.", task=f"bring cup {i}"))
    before, on_disk = {e.id: e for e in store.list()}, files(directory)
    filler = fill(disk, ROOM)
    big = KnowledgeEntry(kind="object_info", text="The mug is fragile.", object="mug",
                         image_embedding=tuple(np.linspace(0.0, 1.0, 4000).tolist()), image_model="hsv-test")
    with pytest.raises(KnowledgeError) as failed:
        store.add(big)
    assert_clear(str(failed.value), directory, "memory.store.knowledge_dir")
    assert files(directory) == on_disk
    assert {e.id: e for e in store.list()} == before == {e.id: e for e in KnowledgeStore(directory).list()}
    filler.unlink()
    stored = store.add(big)
    assert KnowledgeStore(directory).get(stored) == store.get(stored) and len(KnowledgeStore(directory)) == 21


def test_the_task_log_on_a_full_disk_refuses_clearly_and_leaves_no_torn_record(disk: Path) -> None:
    directory = disk / "tasks"
    log = TaskLogStore(directory)
    log.begin("sort fruits", "put the fruits in box 1", ["apple", "pear"], {})
    for i in range(9):
        log.action("sort fruits", "pick_object", [f"apple {i}"], {}, "'success'", True, {})
    path, before = log.path("sort fruits"), [r.to_json() for r in log.records("sort fruits")]
    on_disk = path.read_bytes()
    filler = fill(disk, ROOM)
    crate = "crate " * 8000  # one record of ~48 kB: part of it fits, the rest does not
    with pytest.raises(TaskLogError) as failed:  # before the fix: a short write, acknowledged as record 9
        log.action("sort fruits", "place_object", [crate], {}, "'success'", True, {})
    assert isinstance(failed.value, TeachbotError)
    assert_clear(str(failed.value), directory, "memory.store.tasks_dir")
    assert path.read_bytes() == on_disk  # the part that was written is cut off again
    assert [r.to_json() for r in log.records("sort fruits")] == before
    assert [r.to_json() for r in TaskLogStore(directory).records("sort fruits")] == before
    filler.unlink()
    record = log.action("sort fruits", "place_object", [crate], {}, "'success'", True, {})
    assert record.seq == 10 and [r.seq for r in TaskLogStore(directory).records("sort fruits")] == list(range(11))
