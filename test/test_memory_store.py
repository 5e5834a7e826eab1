"""The episodic memory store: seeds and learned examples, provenance, export/import, and durability
under ``kill -9`` and concurrent writers (real child processes)."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from timing import timeout

from teachbot.memory import LEARNED, SEED, InteractionExample, MemoryStore, MemoryStoreError, UnknownExampleError

SRC = Path(__file__).resolve().parents[1] / "src"


def transcript(*turns: str) -> str:
    lines = []
    for text in turns:
        lines += [">>> wait_for_trigger()", repr({"type": "dialog", "text": text}), ">>> say('done')"]
    return "\n".join(lines)


def learned(example_id: str = "", profile: str = "tabletop", *turns: str, **provenance: str) -> InteractionExample:
    return InteractionExample(id=example_id, profile=profile, transcript=transcript(*(turns or ("put the red block in the bowl",))),
                              **provenance)


@pytest.fixture()
def seeds(tmp_path: Path) -> Path:
    root = tmp_path / "memory_store"
    (root / "tabletop").mkdir(parents=True)
    (root / "tabletop" / "put_block.txt").write_text(transcript("put the red block in the blue bowl") + "\n")
    (root / "tabletop" / "no_turns.txt").write_text(">>> get_obj_names()\n['red block']\n")
    (root / "household").mkdir()
    (root / "household" / "juice.txt").write_text(transcript("bring me the apple juice"))
    return root


def test_add_get_list_remove_round_trip_keeps_provenance(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "learned")
    example_id = store.add(learned("", "tabletop", "put the red block in the bowl", "no, the green one", problem="took the wrong block",
                                   improvement="ask which block when two match", scope="on the tabletop", episode_id="ep-7",
                                   author_model="gpt-test"))
    got = store.get(example_id)
    assert got.source == LEARNED and got.instructions == ("put the red block in the bowl", "no, the green one")
    assert got.created.endswith("+00:00") and got.created[:4].isdigit()  # UTC ISO 8601
    reopened = MemoryStore(tmp_path / "learned")  # what a restarted node sees
    assert reopened.get(example_id) == got
    assert (got.problem, got.improvement, got.scope, got.episode_id, got.author_model) == (
        "took the wrong block", "ask which block when two match", "on the tabletop", "ep-7", "gpt-test")
    assert [e.id for e in reopened.list()] == [example_id] and len(reopened) == 1 and example_id in reopened
    store.remove(example_id)
    assert len(store) == 0 and example_id not in MemoryStore(tmp_path / "learned")
    with pytest.raises(UnknownExampleError):
        store.get(example_id)
    with pytest.raises(UnknownExampleError):
        store.remove(example_id)
    assert not [p for p in (tmp_path / "learned").iterdir() if p.name != ".lock"]  # no temp files left


def test_add_rejects_duplicates_and_invalid_examples(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "learned")
    store.add(learned("a1"))
    with pytest.raises(MemoryStoreError, match="already exists"):
        store.add(learned("a1"))
    for bad, why in [(learned("../escape"), "invalid example id"), (learned(".hidden"), "invalid example id"),
                     (learned("x", ""), "profile"), (InteractionExample(id="y", profile="tabletop"), "transcript"),
                     (learned("z").replace(source=SEED), "source")]:
        with pytest.raises(MemoryStoreError, match=why):
            store.add(bad)
    assert [e.id for e in store.list()] == ["a1"]


def test_seeds_and_learned_together_with_filters(seeds: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        store = MemoryStore(seeds / "learned", seeds)
    assert "no_turns.txt has no wait_for_trigger()" in caplog.text
    store.add(learned("l1", "tabletop", "stack the blocks"))
    store.add(learned("l2", "household", "wipe the table"))
    assert {e.id for e in store.list()} == {"seed:tabletop/put_block", "seed:tabletop/no_turns", "seed:household/juice", "l1", "l2"}
    assert {e.id for e in store.list(profile="household")} == {"seed:household/juice", "l2"}
    assert {e.id for e in store.list(source=SEED, profile="tabletop")} == {"seed:tabletop/put_block", "seed:tabletop/no_turns"}
    assert [e.id for e in store.list(source=LEARNED)] == ["l1", "l2"]
    seed = store.get("seed:tabletop/put_block")
    assert seed.source == SEED and seed.instructions == ("put the red block in the blue bowl",)
    assert not store.get("seed:tabletop/no_turns").keys
    with pytest.raises(MemoryStoreError, match="read-only"):
        store.remove("seed:household/juice")
    with pytest.raises(MemoryStoreError, match="unknown source"):
        store.list(source="other")
    assert len(store) == 5


def test_export_import_round_trip_skips_duplicates(seeds: Path, tmp_path: Path) -> None:
    source = MemoryStore(tmp_path / "a", seeds)
    ids = [source.add(learned("", "tabletop", f"task {i}", problem=f"p{i}", episode_id=f"e{i}")) for i in range(5)]
    export = tmp_path / "export" / "memory.jsonl"
    assert source.export_jsonl(export) == 5  # learned only, by default
    lines = export.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["source"] == LEARNED for line in lines)

    target = MemoryStore(tmp_path / "b", seeds)
    target.add(source.get(ids[0]))  # already there: skipped on import
    report = target.import_jsonl(export)
    assert sorted(report.added) == sorted(ids[1:]) and report.skipped == [ids[0]]
    assert {e.id: e for e in target.list(source=LEARNED)} == {e.id: e for e in source.list(source=LEARNED)}
    again = target.import_jsonl(export)
    assert again.added == [] and sorted(again.skipped) == sorted(ids)

    everything = tmp_path / "all.jsonl"
    assert source.export_jsonl(everything, source="") == 8  # seeds too, on request
    assert len(target.import_jsonl(everything).added) == 0  # seed ids exist as seeds there


def test_import_validates_the_whole_file_first(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(learned("ok1").to_dict()) + "\n\n{not json\n")
    store = MemoryStore(tmp_path / "learned")
    with pytest.raises(MemoryStoreError, match=r"bad.jsonl:3: not JSON"):
        store.import_jsonl(path)
    path.write_text(json.dumps(learned("ok1").to_dict()) + "\n" + json.dumps({"id": "x", "profile": "t", "transcript": 5}) + "\n")
    with pytest.raises(MemoryStoreError, match=r"bad.jsonl:2: .*'transcript' must be a string"):
        store.import_jsonl(path)
    assert len(store) == 0


def test_unreadable_files_and_stale_temps_are_quarantined(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "learned"
    store = MemoryStore(directory)
    store.add(learned("good"))
    (directory / "broken.json").write_text('{"id": "broken", "profile": "tab')
    (directory / "other.json").write_text(json.dumps(learned("not-other").to_dict()))
    stale = directory / ".x.json.abc.tmp"
    stale.write_text('{"id": "x"')
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    fresh = directory / ".y.json.def.tmp"  # a write in progress elsewhere: left alone
    fresh.write_text("{")
    with caplog.at_level(logging.WARNING):
        reopened = MemoryStore(directory)
    assert [e.id for e in reopened.list()] == ["good"]
    moved = sorted(p.name.rsplit(".", 1)[0] for p in reopened.quarantine_dir.iterdir())
    assert moved == ["broken.json", "other.json", "x.json.abc.tmp"]
    assert fresh.exists() and "partial write" in caplog.text and "does not match the file name" in caplog.text


# ---------------------------------------------------------------------------------------------- processes
WRITER = textwrap.dedent("""
    import sys
    from teachbot.memory import InteractionExample, MemoryStore
    directory, tag, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = MemoryStore(directory)
    print("ready", flush=True)
    sys.stdin.readline()  # the go signal
    for i in range(count):
        example_id = f"{tag}-{i}"
        body = (example_id + " ") * size
        store.add(InteractionExample(id=example_id, profile="tabletop", episode_id=tag,
                  transcript=f">>> wait_for_trigger()\\n{{'type': 'dialog', 'text': 'task {example_id}'}}\\n>>> say({body!r})"))
        print(example_id, flush=True)
""")


def start_writer(script: Path, directory: Path, tag: str, count: int, size: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), str(directory), tag, str(count), str(size)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def check_example(example: InteractionExample, size: int) -> None:
    assert example.instructions == (f"task {example.id}",)
    assert example.transcript.count(example.id) == size + 1


def test_kill_9_mid_write_loses_and_corrupts_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    directory, size = tmp_path / "learned", 20_000  # ~0.3 MB per example, so kills land inside writes
    rng = random.Random(7)
    reported: list[str] = []
    for round_ in range(6):
        proc = start_writer(script, directory, f"r{round_}", 10_000, size)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        reported += out.split()  # printed only after add() returned
    assert len(reported) >= 6
    with caplog.at_level(logging.WARNING):
        store = MemoryStore(directory, stale_temp_seconds=0.0)  # every leftover temp is a killed write
    stored = {e.id: e for e in store.list()}
    assert set(reported) <= set(stored), "an example reported as added is missing"
    assert len(stored) - len(reported) <= 6  # at most one write per kill completed after its last report
    for example in stored.values():
        check_example(example, size)
    assert "unreadable example" not in caplog.text
    leftovers = [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers  # partial temps were moved aside, never loaded


def test_two_concurrent_writers_add_100_distinct_examples(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    directory = tmp_path / "learned"
    watcher = MemoryStore(directory)  # opened before: must pick the new files up by itself
    procs = [start_writer(script, directory, tag, 50, 10) for tag in ("a", "b")]
    for proc in procs:  # both are ready: start them together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=timeout(120))[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert sorted(outputs[0] + outputs[1]) == sorted([f"a-{i}" for i in range(50)] + [f"b-{i}" for i in range(50)])
    examples = watcher.list()
    assert len(examples) == 100 and len({e.id for e in examples}) == 100
    for example in MemoryStore(directory).list():
        check_example(example, 10)
