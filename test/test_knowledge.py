"""The knowledge base (DROC): entries and their validation, the durable store (concurrent writer
processes, kill -9 mid-write, quarantine), retrieval by task and by the looks of the object (classic
descriptor on crops rendered by the PyBullet tabletop camera; a random-weight CLIP/DINOv2), the
optional LLM selection, and ``teachbot memory knowledge``."""

from __future__ import annotations

import hashlib
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
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml
from timing import pytest_timeout, timeout

from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.knowledge import (
    KINDS,
    ColourDepthDescriptor,
    KnowledgeConfig,
    KnowledgeEntry,
    KnowledgeError,
    KnowledgeRetriever,
    KnowledgeStore,
    Provenance,
    UnknownEntryError,
    crop_object,
    describe,
    render,
    similarity,
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
    first = store.add(KnowledgeEntry(id="cups", **GRASP_CUPS))
    second = store.add(entry("object_state", "The top drawer is locked.", "drawer", object="top drawer", task="open the drawer"))
    third = store.add(entry("robot_constraint", "The arm cannot reach the top shelf.", "reach"))
    got = store.get(first)
    assert got.provenance.created[:4].isdigit() and got.provenance.episode_id == "ep-3"
    generated = store.add(entry(text="A generated id."))
    assert len(generated) == 32 and store.get(generated).text == "A generated id."
    store.remove(generated)
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
    assert sorted(p.name for p in (tmp_path / "knowledge").iterdir()) == [".lock", "cups.json", "reach.json"]


def test_export_import_skips_duplicates_and_reports_bad_lines(tmp_path: Path) -> None:
    source = KnowledgeStore(tmp_path / "a")
    ids = [source.add(entry("constraint", f"Rule {i}.", f"r{i}", task=f"task {i}")) for i in range(4)]  # (ids sort as made)
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
    start.wait(timeout(30))
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
        process.join(timeout(120))
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


# ---------------------------------------------------------------------------------------------- retrieval
class BagOfWords:
    """A deterministic stand-in sentence embedder: hashed counts of content words (texts sharing them are similar)."""

    name = "bag-of-words-64"
    stop_words = frozenset(["a", "an", "the", "on", "in", "of", "to", "me", "my", "it", "is", "are", "and", "than"])

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        rows = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in zip(rows, texts):
            for word in set(text.lower().replace(".", " ").split()) - self.stop_words:
                row[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % 64] += 1.0
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms > 0, norms, 1.0)


@pytest.fixture(scope="module")
def minilm():
    from teachbot.memory import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()  # the bundled all-MiniLM-L6-v2, offline (as test_memory_retrieval does)
    embedder.warm_up()  # ~5-8 s once per module
    return embedder


def knowledge_base(directory: Path) -> KnowledgeStore:
    store = KnowledgeStore(directory)
    store.add(entry("preference", "The person wants things handed over on the left.", "left-handed"))
    store.add(entry("robot_constraint", "The gripper cannot hold things heavier than 1 kg.", "payload"))
    store.add(KnowledgeEntry(id="grasp-cups", **GRASP_CUPS))
    store.add(entry("constraint", "Press the block down gently before letting go.", "press", task="stack the red block on the green block"))
    store.add(entry("object_state", "The top drawer is locked.", "drawer", object="top drawer", task="open the top drawer"))
    return store


def ids(found) -> list[str]:
    return [r.entry.id for r in found]


def test_always_scoped_entries_always_come_back(tmp_path: Path) -> None:
    retriever = KnowledgeRetriever(knowledge_base(tmp_path / "k"), BagOfWords())
    for task in ("put the cup on the shelf", "tell me a joke", ""):
        found = retriever.retrieve(task)
        assert ids(found)[:2] == ["left-handed", "payload"] and {r.reason for r in found[:2]} == {"always"}
    assert ids(retriever.retrieve("tell me a joke")) == ["left-handed", "payload"]
    assert ids(retriever.retrieve("put the cup on the shelf"))[2:] == ["grasp-cups"]
    # an object named in the request brings that object's entries even when the words differ
    assert ids(retriever.retrieve("fetch a spoon", object_name="the top drawer"))[2:] == ["drawer"]
    assert ids(retriever.retrieve("fetch a spoon", object_name="drawer"))[2:] == []  # "top drawer" is more specific


def test_task_entries_by_sentence_similarity_with_minilm(tmp_path: Path, minilm) -> None:
    store = knowledge_base(tmp_path / "k")
    retriever = KnowledgeRetriever(store, minilm, config=KnowledgeConfig.load())
    mug = retriever.retrieve("place the mug on the top shelf")
    assert ids(mug) == ["left-handed", "payload", "grasp-cups"] and mug[2].reason == "task" and mug[2].text_score > 0.7
    assert ids(retriever.retrieve("stack the blue block on the yellow block"))[2:] == ["press"]
    assert ids(retriever.retrieve("what is the weather today")) == ["left-handed", "payload"]
    assert ids(retriever.retrieve("pass me a drink")) == ["left-handed", "payload"]
    block = retriever.render("please move the cup onto the shelf")
    assert block == ("What I know:\n- The person wants things handed over on the left.\n- The gripper cannot hold things heavier "
                     "than 1 kg.\n- Grasp cups 2 cm higher than the default. (pick: height_offset=0.02, approach='top', "
                     "offsets=[0, 0, 0.02])")
    assert render([], "# ") == "" and render(mug[:1], "# ") == "# What I know:\n# - The person wants things handed over on the left."


def test_cached_text_embeddings_are_used(tmp_path: Path) -> None:
    words = BagOfWords()
    store = KnowledgeStore(tmp_path / "k")
    vector = words.embed(["wipe the table"])[0]
    store.add(entry("constraint", "Use the blue sponge.", "sponge", task="wipe the table", text_embedding=vector, text_model=words.name))
    store.add(entry("constraint", "Use the blue sponge.", "stale", task="clean the desk", text_embedding=vector, text_model="other"))
    words.texts.clear()
    retriever = KnowledgeRetriever(store, words)
    assert ids(retriever.retrieve("wipe the table")) == ["sponge"]
    assert sorted(words.texts) == ["Use the blue sponge.", "clean the desk", "wipe the table"]  # the query, the stale key, the text
    words.texts.clear()
    retriever.retrieve("wipe the table now")
    assert words.texts == ["wipe the table now"]  # keys are embedded once


# ---------------------------------------------------------------------------------------------- visual
@pytest.fixture(scope="module")
def crops(world) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Crops (RGB, depth, mask) of objects rendered by the tabletop camera, cut out by the segmentation:
    'red block' in one scene, 'red block 2', 'blue bowl' and 'red bowl' in another."""
    from teachbot.config import load_yaml
    from teachbot.paths import config_path
    from teachbot.sim.camera import CameraSpec
    from teachbot.world.scene import ObjectSpec, SceneSpec

    spec = CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])
    out = {}
    for scene in ([ObjectSpec("red block", "block", "red", (-0.15, -0.4), 0.3), ObjectSpec("green bowl", "bowl", "green", (0.1, -0.6))],
                  [ObjectSpec("red block 2", "block", "red", (0.12, -0.62), 1.1), ObjectSpec("blue bowl", "bowl", "blue", (-0.1, -0.45)),
                   ObjectSpec("red bowl", "bowl", "red", (0.15, -0.35))]):
        world.reset(SceneSpec(tuple(scene)))
        frame = world.render(spec)
        for state in world.objects():
            out[state.name] = crop_object(frame.rgb, frame.depth, frame.segmentation, state.body_id)
    return out


def test_classic_descriptor_on_rendered_crops(crops) -> None:
    rgb, depth, mask = crops["red block"]
    assert rgb.dtype == np.uint8 and rgb.shape[:2] == depth.shape == mask.shape and 200 < mask.sum() < rgb.shape[0] * rgb.shape[1]
    vectors = {name: describe(*crop) for name, crop in crops.items()}
    red = vectors["red block"]
    assert red.shape == (76,) and red.dtype == np.float32 and red.sum() == pytest.approx(1.0, abs=1e-5)
    assert similarity(red, red) == pytest.approx(1.0)
    # the shape (depth histogram and shape grid) holds most of the mass (descriptor v2, Issue 29 item 4):
    assert similarity(red, vectors["red block 2"]) > 0.85  # another red block, elsewhere, turned
    assert similarity(red, vectors["red bowl"]) < 0.45  # same colour, other shape
    assert similarity(red, vectors["blue bowl"]) < 0.35 and similarity(red, vectors["green bowl"]) < 0.35  # neither
    assert similarity(vectors["blue bowl"], vectors["green bowl"]) > 0.7  # other colour, same shape
    colour_only = describe(rgb, None, mask)
    assert colour_only[40:].sum() == 0 and similarity(colour_only, vectors["red bowl"]) > 0.95  # no depth: colours only
    with pytest.raises(InvalidArgumentError, match="different descriptor settings"):
        similarity(red, red[:40])


def test_visual_retrieval_red_block_not_blue_bowl(tmp_path: Path, crops, minilm) -> None:
    descriptor = ColourDepthDescriptor()
    store = KnowledgeStore(tmp_path / "k")
    store.add(entry("preference", "Say what you are doing.", "talk"))
    store.add(entry("object_info", "This block is slippery; grasp it firmly.", "slippery", object="red block",
                    task="put the red block in the green bowl", image_embedding=descriptor.embed(*crops["red block"]),
                    image_model=descriptor.name))
    retriever = KnowledgeRetriever(store, minilm, descriptor, KnowledgeConfig.load())
    task = "put the block in the bowl"
    by_text = retriever.retrieve(task)  # no image: the text alone brings it
    assert ids(by_text) == ["talk", "slippery"] and by_text[1].visual_score is None
    same = retriever.retrieve(task, image=descriptor.embed(*crops["red block 2"]))
    assert ids(same) == ["talk", "slippery"] and same[1].visual_score > 0.85
    assert same[1].score == pytest.approx(0.5 * same[1].text_score + 0.5 * same[1].visual_score)
    assert ids(retriever.retrieve(task, image=descriptor.embed(*crops["blue bowl"]))) == ["talk"]  # looks different: dropped
    assert ids(retriever.retrieve(task, image=descriptor.embed(*crops["red bowl"]))) == ["talk"]
    # an object entry comes back by its looks alone, for a request that does not say which object
    assert ids(retriever.retrieve("hand me that", image=descriptor.embed(*crops["red block 2"]))) == ["talk", "slippery"]
    assert ids(retriever.retrieve("hand me that")) == ["talk"]


def save_random_vision_models(root: Path) -> dict[str, Path]:
    """Tiny random-weight CLIP (vision tower alone, and a whole CLIP model) and DINOv2 with their image processors."""
    import torch
    from transformers import CLIPConfig, CLIPModel, CLIPVisionConfig, CLIPVisionModelWithProjection, Dinov2Config, Dinov2Model
    from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tiny = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    torch.manual_seed(0)
    CLIPVisionModelWithProjection(CLIPVisionConfig(**tiny, image_size=32, patch_size=8, projection_dim=16)).save_pretrained(root / "clip")
    CLIPModel(CLIPConfig(text_config=tiny, vision_config={**tiny, "image_size": 32, "patch_size": 8}, projection_dim=24)).save_pretrained(
        root / "clip_full")
    Dinov2Model(Dinov2Config(**{**tiny, "hidden_size": 40}, image_size=28, patch_size=14)).save_pretrained(root / "dino")
    for name in ("clip", "clip_full"):
        CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(root / name)
    BitImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}).save_pretrained(root / "dino")
    return {"clip": root / "clip", "clip_full": root / "clip_full", "dino": root / "dino"}


def test_transformers_image_embedders_with_random_weights(tmp_path: Path, crops) -> None:
    import torch

    from teachbot.knowledge import TransformersImageEmbedder

    paths = save_random_vision_models(tmp_path)
    for name, size in (("clip", 16), ("clip_full", 24), ("dino", 40)):
        embedder = TransformersImageEmbedder(paths[name])
        vectors = {key: embedder.embed(*crop) for key, crop in crops.items()}
        assert embedder.dim == size and embedder.metric == "cosine" and embedder.name == f"transformers:{name}"
        for vector in vectors.values():
            assert vector.shape == (size,) and vector.dtype == np.float32 and np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
        scores = [embedder.similarity(a, b) for a in vectors.values() for b in vectors.values()]
        assert all(-1.0 <= s <= 1.0 for s in scores)
        assert embedder.similarity(vectors["red block"], vectors["red block"]) == pytest.approx(1.0)
    # the vision tower of a whole CLIP checkpoint gives CLIP's own image features
    from transformers import CLIPModel

    full = TransformersImageEmbedder(paths["clip_full"])
    rgb = crops["blue bowl"][0]
    pixels = full._load()[1](images=[rgb], return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        reference = CLIPModel.from_pretrained(paths["clip_full"]).get_image_features(pixel_values=pixels)
    reference = getattr(reference, "pooler_output", reference)[0].numpy()
    assert np.allclose(full.embed(rgb), reference / np.linalg.norm(reference), atol=1e-5)
    with pytest.raises(ConfigError, match="no config.json"):
        TransformersImageEmbedder(tmp_path)


def test_retrieval_with_a_learned_embedder_uses_its_threshold(tmp_path: Path, crops) -> None:
    from teachbot.knowledge import TransformersImageEmbedder

    embedder = TransformersImageEmbedder(save_random_vision_models(tmp_path)["clip"])
    store = KnowledgeStore(tmp_path / "k")
    store.add(entry("object_info", "Grasp it firmly.", "firm", object="red block", image_embedding=embedder.embed(*crops["red block"]),
                    image_model=embedder.name))
    store.add(entry("object_info", "Old vectors of another model are not compared.", "other", object="red block",
                    image_embedding=[1.0] * 16, image_model="transformers:another"))
    query = embedder.embed(*crops["red block 2"])
    score = embedder.similarity(query, store.get("firm").image_embedding)
    for threshold, expected in ((score - 0.01, ["firm"]), (score + 0.01, [])):
        config = KnowledgeConfig(learned_visual_threshold=threshold, visual_threshold=2.0)  # (the classic one would drop all)
        retriever = KnowledgeRetriever(store, BagOfWords(), embedder, config)
        assert retriever.visual_threshold == threshold and ids(retriever.retrieve("hand me that", image=query)) == expected


# ---------------------------------------------------------------------------------------------- LLM selection, config
def test_llm_selection_hook(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from teachbot.llm.scripted import ScriptedModel

    store = knowledge_base(tmp_path / "k")
    store.add(entry("constraint", "Hold cups by the handle.", "handle", task="put the cup on the shelf"))
    enabled = KnowledgeConfig(select_enabled=True)
    task = "put the cup on the shelf"
    assert ids(KnowledgeRetriever(store, BagOfWords()).retrieve(task))[2:] == ["grasp-cups", "handle"]
    model = ScriptedModel(["I would keep [1] only."])
    assert ids(KnowledgeRetriever(store, BagOfWords(), config=enabled, select_model=model).retrieve(task, "cup"))[2:] == ["handle"]
    prompt = model.prompts[0]
    assert "0. Grasp cups 2 cm higher than the default.\n1. Hold cups by the handle." in prompt
    assert "The task: put the cup on the shelf\nThe object at hand: cup" in prompt
    assert "handed over on the left" not in prompt  # always-scoped entries are not up for selection
    with caplog.at_level(logging.WARNING):
        kept = KnowledgeRetriever(store, BagOfWords(), config=enabled, select_model=ScriptedModel(["both, I think"])).retrieve(task)
        assert ids(kept)[2:] == ["grasp-cups", "handle"] and "cannot read the selection model's answer" in caplog.text
        assert ids(KnowledgeRetriever(store, BagOfWords(), config=enabled, select_model=ScriptedModel(["[]"])).retrieve(task)) == [
            "left-handed", "payload"]  # the always-scoped ones are never selected away
        KnowledgeRetriever(store, BagOfWords(), config=enabled)
        assert "no model was given" in caplog.text
    off = ScriptedModel(["[1]"])
    KnowledgeRetriever(store, BagOfWords(), select_model=off).retrieve(task)  # off by default
    assert off.prompts == []


def test_shipped_config_and_bad_values(tmp_path: Path) -> None:
    shipped = KnowledgeConfig.load()
    assert shipped == KnowledgeConfig() and not shipped.select_enabled
    assert ColourDepthDescriptor(shipped.descriptor).name == ColourDepthDescriptor().name
    assert (ROOT / "prompts" / shipped.select_prompt).is_file()
    for section, key, value, message in (("retrieval", "k", 0, "retrieval.k >= 1"),
                                         ("retrieval", "text_threshold", "high", "retrieval.text_threshold must be a float"),
                                         ("select", "enabled", "yes", "select.enabled must be true or false"),
                                         ("descriptor", "depth_range", -1, "descriptor.depth_range > 0")):
        raw = yaml.safe_load((ROOT / "config" / "knowledge.yaml").read_text())
        raw["knowledge"][section][key] = value
        with pytest.raises(ConfigError, match=message):
            KnowledgeConfig.from_mapping(raw, "test")


# ---------------------------------------------------------------------------------------------- CLI
@pytest.fixture()
def knowledge_config(tmp_path: Path) -> Path:
    """A memory config whose knowledge base is tmp_path/kb, holding two entries."""
    raw = yaml.safe_load((ROOT / "config" / "memory.yaml").read_text())
    raw["memory"]["store"] = {"seeds_dir": "", "learned_dir": str(tmp_path / "learned"), "knowledge_dir": str(tmp_path / "kb")}
    config = tmp_path / "memory.yaml"
    config.write_text(yaml.safe_dump(raw))
    store = KnowledgeStore(tmp_path / "kb")
    store.add(KnowledgeEntry(id="cups", **GRASP_CUPS))
    store.add(entry("object_state", "The top drawer is locked.", "drawer", object="top drawer", task="open the top drawer"))
    return config


def test_cli_knowledge_list_show_remove(knowledge_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from teachbot.cli import main

    config = ["--config", str(knowledge_config)]
    assert main(["memory", "knowledge", "list", *config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "KIND", "SCOPE", "OBJECT", "CREATED", "TEXT"]
    assert lines[1].split()[:4] == ["cups", "skill_parameter", "task", "cup"]
    assert lines[1].endswith("Grasp cups 2 cm higher than the default.")
    assert lines[2].split()[:5] == ["drawer", "object_state", "object", "top", "drawer"]
    assert lines[-1] == f"2 entries (0 always, 1 task, 1 object); knowledge in {tmp_path / 'kb'}"
    assert main(["memory", "knowledge", "list", *config, "--kind", "object_state"]) == 0
    out = capsys.readouterr().out
    assert "drawer" in out and "cups" not in out and "1 entry (" in out
    assert main(["memory", "knowledge", "list", *config, "--object", "cup", "--task", "shelf"]) == 0
    assert "cups" in capsys.readouterr().out

    assert main(["memory", "knowledge", "show", "cups", *config]) == 0
    out = capsys.readouterr().out
    assert "kind:           skill_parameter" in out and "parameters:     height_offset=0.02, approach='top', offsets=[0, 0, 0.02]" in out
    assert "robot_id:       panda-1" in out and out.rstrip().endswith("learned from:\n  no, grab it higher")
    assert main(["memory", "knowledge", "show", "nope", *config]) == 2
    assert "no knowledge entry with id 'nope'" in capsys.readouterr().err

    assert main(["memory", "knowledge", "remove", "drawer", "nope", *config]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == "removed drawer" and "no knowledge entry with id 'nope'" in captured.err
    assert [e.id for e in KnowledgeStore(tmp_path / "kb").list()] == ["cups"]


def test_cli_knowledge_export_import(knowledge_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from teachbot.cli import main

    export, other = tmp_path / "out" / "knowledge.jsonl", tmp_path / "other_robot"
    assert main(["memory", "knowledge", "export", str(export), "--config", str(knowledge_config)]) == 0
    assert "exported 2 entries to" in capsys.readouterr().out
    assert main(["memory", "knowledge", "import", str(export), "--knowledge", str(other)]) == 0
    assert f"imported 2 entries into {other}" in capsys.readouterr().out
    assert KnowledgeStore(other).get("cups") == KnowledgeStore(tmp_path / "kb").get("cups")
    export.write_text(export.read_text() + '{"kind": "preference"}\n' + json.dumps(entry(entry_id="new").to_dict()) + "\n")
    assert main(["memory", "knowledge", "import", str(export), "--knowledge", str(other)]) == 1
    captured = capsys.readouterr()
    assert "imported 1 entry" in captured.out and "skipped 2 already stored: cups, drawer" in captured.out
    assert f"error: {export}:3: field 'text' is empty" in captured.err and "new" in KnowledgeStore(other)
    assert main(["memory", "knowledge", "export", str(tmp_path / "one.jsonl"), "--knowledge", str(other), "--kind", "preference"]) == 0
    assert [json.loads(line)["id"] for line in (tmp_path / "one.jsonl").read_text().splitlines()] == ["new"]


def test_cli_knowledge_as_a_process_and_the_default_directory(knowledge_config: Path, tmp_path: Path) -> None:
    from teachbot.memory import MemoryConfig
    from teachbot.paths import share_dir

    teachbot = Path(sys.executable).parent / "teachbot"
    done = subprocess.run([str(teachbot), "memory", "knowledge", "list", "--config", str(knowledge_config)], capture_output=True,
                          text=True, timeout=pytest_timeout(120), check=False)
    assert done.returncode == 0 and "2 entries" in done.stdout, done.stderr
    assert MemoryConfig.load().knowledge_path == share_dir() / "memory_store" / "knowledge"  # the shipped config
    without = MemoryConfig.from_mapping({"memory": {"store": {"learned_dir": str(tmp_path / "robot" / "learned")}}})
    assert without.knowledge_path == tmp_path / "robot" / "knowledge"  # next to the learned examples
