"""The classic descriptor's shape grid (Issue 29 item 4) on synthetic crops: what it measures, its settings, its
version. The rendered upright/flipped cups are in test_upright_flipped.py."""

from __future__ import annotations

import numpy as np
import pytest

from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.knowledge.descriptor import ColourDepthDescriptor, DescriptorConfig, describe, shape_grid, similarity


def cup(colour: tuple[int, int, int], hollow_top: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 40x30 crop of a cup-like silhouette: an open top (its upper rows 4 cm deeper: the hollow behind the
    rim, and the wide rim filling the top rows) or a closed base up (flat, and narrower at the top)."""
    rgb = np.zeros((40, 30, 3), np.uint8)
    rgb[:] = colour
    depth = np.full((40, 30), 0.8, np.float32)
    mask = np.zeros((40, 30), bool)
    for row in range(40):
        half = 15 - (row // 5 if hollow_top else (39 - row) // 5)  # the wide end at the top or at the bottom
        mask[row, 15 - half:15 + half] = True
    if hollow_top:
        depth[:12] += 0.04
    return rgb, depth, mask


RED, BLUE = (200, 30, 30), (30, 50, 200)


def test_the_shape_outweighs_the_colour() -> None:
    red_up, blue_up, red_down = describe(*cup(RED, True)), describe(*cup(BLUE, True)), describe(*cup(RED, False))
    assert similarity(red_up, blue_up) == pytest.approx(0.8 + 0.2 * 0.4, abs=0.01)  # all but the colour part
    assert similarity(red_up, red_down) < similarity(red_up, blue_up) - 0.2  # colour is the distractor


def test_the_grid_weights_each_row_by_its_fill() -> None:
    cfg = DescriptorConfig()
    selected = np.zeros((8, 6), bool)
    selected[:4, :] = True  # the upper half full
    selected[4:, 2:4] = True  # the lower half a third full
    offsets = np.zeros((8, 6))
    grid = shape_grid(selected, selected, offsets, cfg).reshape(cfg.grid_rows, cfg.shape_bins)
    assert grid.sum(axis=1) == pytest.approx([1.0, 1.0, 1 / 3, 1 / 3])
    assert (grid.argmax(axis=1) == cfg.shape_bins // 2).all()  # every row at the median's depth: the middle bin
    deeper = offsets.copy()
    deeper[:2] = cfg.shape_range  # the top row as far as the range reaches: the last bin
    assert shape_grid(selected, selected, deeper, cfg).reshape(cfg.grid_rows, cfg.shape_bins)[0, -1] == pytest.approx(1.0)


def test_no_depth_no_shape_and_the_version_in_the_name() -> None:
    rgb, _, mask = cup(RED, True)
    colour_only = describe(rgb, None, mask)
    assert colour_only.sum() == pytest.approx(0.2 * 0.6) and colour_only[40:].sum() == 0
    name = ColourDepthDescriptor().name
    assert name.startswith("hsv-depth-shape-v2:") and "grid4x1b7" in name
    assert ColourDepthDescriptor(DescriptorConfig(grid_rows=6)).name != name  # other settings: vectors never compared
    with pytest.raises(InvalidArgumentError, match="different descriptor settings"):
        similarity(describe(*cup(RED, True)), np.zeros(48))  # a v1 vector


@pytest.mark.parametrize(("field", "value"), [("grid_rows", 0), ("shape_range", 0.0), ("shape_weight", 1.0), ("colour_weight", 0.0)])
def test_bad_settings_are_config_errors(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match="knowledge.descriptor"):
        ColourDepthDescriptor(DescriptorConfig(**{field: value}))
