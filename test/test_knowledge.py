"""The knowledge base (DROC): entries and their validation, the durable store (concurrent writer
processes, kill -9 mid-write, quarantine), retrieval by task and by the looks of the object (classic
descriptor on crops rendered by the PyBullet tabletop camera; a random-weight CLIP/DINOv2), the
optional LLM selection, and ``teachbot memory knowledge``."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from teachbot.knowledge import (
    KINDS,
    KnowledgeEntry,
    KnowledgeError,
    KnowledgeStore,
    Provenance,
    UnknownEntryError,
)

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def entry(kind: str = "preference", text: str = "The person likes the blue cup.", entry_id: str = "", **fields) -> KnowledgeEntry:
    return KnowledgeEntry(id=entry_id, kind=kind, text=text, **fields)


GRASP_CUPS = dict(kind="skill_parameter", text="Grasp cups 2 cm higher than the default.", task="put the cup on the shelf",
                  object="cup", skill="pick", parameters={"height_offset": 0.02, "approach": "top", "offsets": [0, 0, 0.02]},
                  provenance=Provenance(episode_id="ep-3", robot_id="panda-1", model="gpt-test", source=("no, grab it higher",)))


# ---------------------------------------------------------------------------------------------- entries
def test_entry_json_round_trip_and_defaults() -> None:
    full = KnowledgeEntry(id="k1", image_embedding=np.arange(4, dtype=np.float32), image_model="hsv-test",
                          text_embedding=[0.5, 0.5], text_model="minilm", **GRASP_CUPS)
    data = json.loads(json.dumps(full.to_dict()))
    assert KnowledgeEntry.from_dict(data) == full
    assert full.scope == "task" and full.parameters["offsets"] == (0, 0, 0.02) and full.image_embedding == (0.0, 1.0, 2.0, 3.0)
    assert data["parameters"] == {"height_offset": 0.02, "approach": "top", "offsets": [0, 0, 0.02]}
    assert data["provenance"]["source"] == ["no, grab it higher"] and full.keys == ("put the cup on the shelf", full.text)
    with pytest.raises(TypeError):
        full.parameters["height_offset"] = 1  # type: ignore[index]  # read-only
    assert {kind: entry(kind, object="mug", skill="pick", parameters={"x": 1}).scope for kind in KINDS} == {
        "constraint": "task", "robot_constraint": "always", "preference": "always", "skill_parameter": "task",
        "object_info": "object", "object_state": "object"}
    minimal = KnowledgeEntry.from_dict({"kind": "preference", "text": "No sugar in the coffee.", "unknown": 1})
    assert minimal.scope == "always" and minimal.image_embedding is None and minimal.provenance == Provenance()


@pytest.mark.parametrize(("data", "field"), [
    ({"kind": "wish", "text": "x"}, "'kind'"),
    ({"kind": "preference", "text": "  "}, "'text'"),
    ({"kind": "preference", "text": 5}, "'text'"),
    ({"kind": "preference", "text": "x", "scope": "sometimes"}, "'scope'"),
    ({"kind": "preference", "text": "x", "id": "../up"}, "'id'"),
    ({"kind": "skill_parameter", "text": "x", "skill": "pick"}, "'parameters'"),
    ({"kind": "skill_parameter", "text": "x", "skill": "pick", "parameters": {"h": [1, "a"]}}, "'parameters.h'"),
    ({"kind": "skill_parameter", "text": "x", "skill": "pick", "parameters": [1]}, "'parameters'"),
    ({"kind": "object_state", "text": "The drawer is locked."}, "'object'"),
    ({"kind": "preference", "text": "x", "image_embedding": [1.0, "nan"], "image_model": "m"}, "'image_embedding'"),
    ({"kind": "preference", "text": "x", "image_embedding": [1.0, float("nan")], "image_model": "m"}, "'image_embedding'"),
    ({"kind": "preference", "text": "x", "image_embedding": {"a": 1}, "image_model": "m"}, "'image_embedding'"),
    ({"kind": "preference", "text": "x", "image_embedding": [1.0]}, "'image_model'"),
    ({"kind": "preference", "text": "x", "text_embedding": [], "text_model": "m"}, "'text_embedding'"),
    ({"kind": "preference", "text": "x", "provenance": {"source": 3}}, "'provenance.source'"),
    ({"kind": "preference", "text": "x", "provenance": {"robot_id": 3}}, "'provenance.robot_id'"),
    ({"kind": "preference", "text": "x", "provenance": []}, "'provenance'"),
])
def test_invalid_entries_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"^here: .*{field}"):
        KnowledgeEntry.from_dict(data, "here")
    with pytest.raises(KnowledgeError, match="expected a JSON object"):
        KnowledgeEntry.from_dict([data])


# ---------------------------------------------------------------------------------------------- store
def test_store_add_get_list_remove(tmp_path: Path) -> None:
    store = KnowledgeStore(tmp_path / "knowledge")
    first = store.add(KnowledgeEntry(**GRASP_CUPS))
    second = store.add(entry("object_state", "The top drawer is locked.", "drawer", object="top drawer", task="open the drawer"))
    third = store.add(entry("robot_constraint", "The arm cannot reach the top shelf.", "reach"))
    got = store.get(first)
    assert len(first) == 32 and got.provenance.created[:4].isdigit() and got.provenance.episode_id == "ep-3"
    reopened = KnowledgeStore(tmp_path / "knowledge")  # what another process sees
    assert reopened.get(first) == got and len(reopened) == 3 and second in reopened
    assert [e.id for e in reopened.list()] == [first, second, third]  # oldest first
    assert [e.id for e in store.list(kind="object_state")] == [second]
    assert [e.id for e in store.list(object="DRAWER")] == [second] and [e.id for e in store.list(task="shelf")] == [first]
    assert [e.id for e in store.list(scope="always")] == [third]
    with pytest.raises(KnowledgeError, match="unknown kind filter"):
        store.list(kind="wish")
    with pytest.raises(KnowledgeError, match="already exists"):
        store.add(entry(entry_id="drawer"))
    reopened.remove(second)  # another process removes: this one notices
    assert second not in store and [e.id for e in store.list()] == [first, third]
    with pytest.raises(UnknownEntryError, match="no knowledge entry with id 'drawer'"):
        store.get(second)
    with pytest.raises(UnknownEntryError):
        store.remove(second)
    assert sorted(p.name for p in (tmp_path / "knowledge").iterdir()) == [".lock", f"{first}.json", "reach.json"]


def test_export_import_skips_duplicates_and_reports_bad_lines(tmp_path: Path) -> None:
    source = KnowledgeStore(tmp_path / "a")
    ids = [source.add(entry("constraint", f"Rule {i}.", task=f"task {i}")) for i in range(4)]
    export = tmp_path / "out" / "knowledge.jsonl"
    assert source.export_jsonl(export) == 4 and source.export_jsonl(tmp_path / "one.jsonl", task="task 2") == 1
    target = KnowledgeStore(tmp_path / "b")
    target.add(source.get(ids[0]))
    lines = export.read_text().splitlines()
    lines[2:2] = ["{not json", json.dumps({"id": "bad", "kind": "wish", "text": "x"}), "", lines[1]]  # bad, bad, blank, dup
    export.write_text("\n".join(lines) + "\n")
    report = target.import_jsonl(export)
    assert report.added == ids[1:] and report.skipped == [ids[0], ids[1]]
    assert report.errors == [f"{export}:3: not JSON (Expecting property name enclosed in double quotes)",
                             f"{export}:4: field 'kind' must be one of {', '.join(KINDS)}; got 'wish'"]
    assert {e.id: e for e in target.list()} == {e.id: e for e in source.list()}
    with pytest.raises(KnowledgeError, match="cannot read"):
        target.import_jsonl(tmp_path / "missing.jsonl")


def test_unreadable_files_and_stale_temps_are_quarantined(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "knowledge"
    KnowledgeStore(directory).add(entry(entry_id="good"))
    (directory / "torn.json").write_text('{"id": "torn", "kind": "prefer')
    (directory / "wrongkind.json").write_text(json.dumps({"id": "wrongkind", "kind": "wish", "text": "x"}))
    (directory / "other.json").write_text(json.dumps(entry(entry_id="not-other").to_dict()))
    (directory / "binary.json").write_bytes(b"\xff\xfe\x00")
    stale = directory / ".x.json.abc.tmp"
    stale.write_text('{"id": "x"')
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    fresh = directory / ".y.json.def.tmp"  # a write in progress in another process: left alone
    fresh.write_text("{")
    with caplog.at_level(logging.WARNING):
        store = KnowledgeStore(directory)
    assert [e.id for e in store.list()] == ["good"]
    moved = sorted(p.name.rsplit(".", 1)[0] for p in store.quarantine_dir.iterdir())
    assert moved == ["binary.json", "other.json", "torn.json", "wrongkind.json", "x.json.abc.tmp"]
    assert fresh.exists() and "partial write" in caplog.text and "does not match the file name" in caplog.text
    assert "field 'kind'" in caplog.text
    # nothing is lost: the quarantined bytes are the files' bytes
    assert any(p.read_bytes() == b'{"id": "torn", "kind": "prefer' for p in store.quarantine_dir.iterdir())


# ---------------------------------------------------------------------------------------------- processes
def _add_many(directory: str, tag: str, count: int, start: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    """A writer process: ``count`` entries with a recognisable body, once ``start`` is set."""
    store = KnowledgeStore(directory)
    start.wait(30)
    for i in range(count):
        store.add(_numbered(tag, i, 64))


def _numbered(tag: str, i: int, size: int) -> KnowledgeEntry:
    """Entry ``i`` of writer ``tag``, its correction transcript ``size`` times its id long (cheap to build, slow to write)."""
    entry_id = f"{tag}-{i}"
    return KnowledgeEntry(id=entry_id, kind="object_info", text=f"Fact {entry_id}.", object=f"object {entry_id}",
                          task=f"task {entry_id}", image_embedding=[float(i), 0.5, -1.0], image_model="test",
                          provenance=Provenance(episode_id=tag, source=(entry_id, f"{entry_id} " * size)))


def _check(found: KnowledgeEntry) -> None:
    tag, i = found.id.rsplit("-", 1)
    expected = _numbered(tag, int(i), found.provenance.source[1].count(found.id))
    assert found == expected.replace(provenance={"created": found.created}), f"{found.id} was stored corrupted"


def test_concurrent_writer_processes_lose_and_corrupt_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "knowledge"
    watcher = KnowledgeStore(directory)  # opened before: must pick the new files up by itself
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    writers = [context.Process(target=_add_many, args=(str(directory), tag, 40, start)) for tag in "abcd"]
    for process in writers:
        process.start()
    start.set()  # all at once
    for process in writers:
        process.join(120)
    assert [p.exitcode for p in writers] == [0, 0, 0, 0]
    found = watcher.list()
    assert sorted(e.id for e in found) == sorted(f"{tag}-{i}" for tag in "abcd" for i in range(40))
    for item in found:
        _check(item)
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[5])
    from test_knowledge import _numbered
    from teachbot.knowledge import KnowledgeStore
    directory, tag, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = KnowledgeStore(directory)
    print("ready", flush=True)
    sys.stdin.readline()  # the go signal
    for i in range(count):
        store.add(_numbered(tag, i, size))
        print(f"{tag}-{i}", flush=True)
""")


def test_kill_9_mid_write_leaves_no_partial_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    directory, size = tmp_path / "knowledge", 60_000  # ~0.4 MB per entry, so kills land inside writes
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    rng = random.Random(11)
    reported: list[str] = []
    for round_ in range(6):
        proc = subprocess.Popen([sys.executable, str(script), str(directory), f"r{round_}", "10000", str(size), str(ROOT / "test")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(rng.uniform(0.1, 0.5))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        reported += out.split()  # printed only after add() returned
    assert len(reported) >= 6
    with caplog.at_level(logging.WARNING):
        store = KnowledgeStore(directory, stale_temp_seconds=0.0)  # every leftover temp is a killed write
    stored = {e.id: e for e in store.list()}
    assert set(reported) <= set(stored), "an entry reported as added is missing"
    assert len(stored) - len(reported) <= 6  # at most one write per kill completed after its last report
    for item in stored.values():
        _check(item)
    assert "unreadable entry" not in caplog.text
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]  # partial temps moved aside, never loaded
