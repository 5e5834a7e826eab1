"""Scene generation and explicit scene files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from teachbot.errors import SceneSpecError
from teachbot.world.scene import generate_scene, load_scene_file, scene_from_yaml

BENCHMARK = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "cap_tabletop.yaml"


def test_same_seed_same_scene_and_different_seeds_differ(tabletop):
    assert generate_scene(7, tabletop) == generate_scene(7, tabletop)
    assert generate_scene(7, tabletop) != generate_scene(8, tabletop)


@pytest.mark.parametrize("seed", range(40))
def test_generated_scene_obeys_the_benchmark_rules(seed, tabletop):
    scene = generate_scene(seed, tabletop)
    blocks = [o for o in scene.objects if o.category == "block"]
    bowls = [o for o in scene.objects if o.category == "bowl"]
    assert 1 <= len(blocks) <= 4 and 1 <= len(bowls) <= 4
    assert len({o.color for o in blocks}) == len(blocks) and len({o.color for o in bowls}) == len(bowls)
    assert all(o.color in tabletop.colors for o in scene.objects)
    xy = np.array([o.position for o in scene.objects])
    (x0, x1), (y0, y1) = tabletop.spawn_area["x"], tabletop.spawn_area["y"]
    assert np.all((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1))
    gaps = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(len(xy))
    assert gaps.min() >= tabletop.min_separation
    assert all(o.name == f"{o.color} {o.category}" for o in scene.objects)


def test_config_matches_the_shared_benchmark(tabletop):
    if not BENCHMARK.is_file():
        pytest.skip("../shared/benchmarks/cap_tabletop.yaml not beside this checkout")
    # the file's last section (robot_api_in_the_paper) is prose that is not valid YAML; skip it
    text = BENCHMARK.read_text().split("\nrobot_api_in_the_paper:")[0]
    bench = yaml.safe_load(text)
    assert tuple(bench["scene"]["colors"]) == tabletop.colors
    assert bench["scene"]["min_separation"] == tabletop.min_separation
    assert bench["scene"]["blocks"]["size"] == tabletop.block_size
    assert {k: tuple(v) for k, v in bench["workspace"]["bounds"].items()} == tabletop.bounds
    assert {k: tuple(v) for k, v in bench["workspace"]["named_points"].items()} == tabletop.named_points
    assert {k: tuple(v) for k, v in bench["scene"]["spawn_area"].items()} == tabletop.spawn_area


def test_yaml_round_trip(tabletop):
    scene = generate_scene(3, tabletop)
    again = scene_from_yaml(scene.to_yaml(), tabletop)
    assert again.names() == scene.names()
    assert np.allclose([o.position for o in again.objects], [o.position for o in scene.objects], atol=1e-6)


def test_example_scene_file_loads(tabletop):
    scene = load_scene_file(Path(__file__).resolve().parents[1] / "config" / "scenes" / "example.yaml", tabletop)
    assert "red block" in scene.names() and scene.seed is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("objects: [", "invalid YAML"),
        ("- just a list", "non-empty list 'objects:'"),
        ("objects: [{category: plate, color: red, position: [0, -0.5]}]", "category must be one of"),
        ("objects: [{category: block, color: teal, position: [0, -0.5]}]", "color must be one of"),
        ("objects: [{category: block, color: red, position: [0.9, -0.5]}]", "outside the workspace"),
        ("objects: [{category: block, color: red, position: [0]}]", "position must be [x, y]"),
        (
            "objects: [{category: block, color: red, position: [0, -0.5]}, {category: block, color: red, position: [0.1, -0.5]}]",
            "duplicate name",
        ),
        ("objects: [{category: block, color: red, position: [0, -0.5]}, {category: bowl, color: red, position: [0.02, -0.5]}]", "overlap"),
    ],
)
def test_malformed_scene_gets_a_clear_error(text, needle, tabletop):
    with pytest.raises(SceneSpecError, match=None) as info:
        scene_from_yaml(text, tabletop, source="bad.yaml")
    assert needle in str(info.value) and str(info.value).startswith("bad.yaml")


def test_missing_scene_file(tabletop, tmp_path):
    with pytest.raises(SceneSpecError, match="scene file not found"):
        load_scene_file(tmp_path / "nope.yaml", tabletop)
