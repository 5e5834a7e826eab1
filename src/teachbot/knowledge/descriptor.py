"""Visual descriptors of an object's crop, for retrieving knowledge about objects that look alike.

Two kinds behind one ``ImageEmbedder`` protocol:

- ``ColourDepthDescriptor`` (the classic one; no weights, numpy only), three parts in one float vector:
  a normalised HSV colour histogram of the object's pixels (hue x saturation for coloured pixels,
  soft-binned so shading noise at a bin edge does not flip bins; a brightness histogram for grey, black
  and white pixels); a histogram of each pixel's depth relative to the object's median depth in metres
  (a block's flat faces, a bowl's hollow, a bottle's height differ; metric, so size counts too); and a
  **shape grid**: the mask's tight box cut into ``grid_rows`` x ``grid_cols`` cells (by default 4 rows
  and one column: the object's profile from top to bottom), each cell's relative depth (its mean,
  soft-binned over ``shape_bins`` bins of +-``shape_range`` m) weighted by how much of the cell the
  object fills. The grid is in the object's own frame (normalised to its box), so it says where the
  object is deep or shallow and how wide it is there: an upright cup's open top (the hollow behind the
  rim, far away, in the upper rows; the wide rim filling them) differs from a flipped cup's closed base
  (a near, flat top; the narrow base up). The settings were calibrated on rendered cups
  (tools/calibrate_looks.py). The grid holds
  ``shape_weight`` of the mass; the colour and depth histograms share the rest as ``colour_weight``
  and 1 - ``colour_weight``, so with colour as the distractor the shape decides.
  The mask selects the object's pixels (from a detector, or from depth above the table: see
  ``teachbot.knowledge.object_crop``); without one, the whole crop counts. Without depth there is
  neither depth part nor grid (zeros).
  ``similarity`` is the **histogram intersection** sum(min(a, b)) divided by the smaller of the two
  masses: 1.0 for identical vectors, 0.0 for disjoint ones; when only one side has depth, the
  comparison is colour-only (still in [0, 1]).
- ``TransformersImageEmbedder``: a CLIP vision tower with its projection
  (``CLIPVisionModelWithProjection``) or any ``AutoModel`` image backbone such as DINOv2 (pooled
  output, else the CLS token), loaded from a local directory (``local_files_only``); L2-normalised
  vectors compared by **cosine** similarity in [-1, 1].

Vectors of different embedders (or descriptor settings) are never compared: each embedder has a
``name`` that a knowledge entry keeps next to its vector (``image_model``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from teachbot.errors import ConfigError, InvalidArgumentError

INTERSECTION, COSINE = "intersection", "cosine"


@runtime_checkable
class ImageEmbedder(Protocol):
    """Maps an object's crop (RGB HxWx3 uint8, optional depth HxW metres, optional boolean mask) to a vector.

    ``name`` identifies the embedder and its settings; ``metric`` is ``intersection`` (scores in [0, 1])
    or ``cosine`` (scores in [-1, 1]), which says which visual threshold of config/knowledge.yaml applies.
    """

    name: str
    metric: str

    def embed(self, rgb: np.ndarray, depth: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray: ...

    def similarity(self, a: Any, b: Any) -> float: ...


@dataclass(frozen=True)
class DescriptorConfig:
    """Bins and thresholds of the classic descriptor (part of its ``name``: change one, and old vectors no longer compare)."""

    hue_bins: int = 12
    saturation_bins: int = 3
    grey_bins: int = 4
    depth_bins: int = 8
    depth_range: float = 0.06  # metres either side of the median depth; farther pixels go to the end bins
    min_saturation: float = 0.25  # below this (or below min_value) a pixel counts as grey/black/white
    min_value: float = 0.12
    colour_weight: float = 0.6  # the colour histogram's share of what the shape grid leaves; the depth histogram has the rest
    # The shape grid: calibrated on rendered cups, upright and flipped, by tools/calibrate_looks.py. One column:
    # the fixed camera's perspective leans an object at the image's side, which columns would read as shape.
    grid_rows: int = 4  # the shape grid over the object's box (rows top to bottom, columns left to right)
    grid_cols: int = 1
    shape_bins: int = 7  # per cell, soft bins of its mean depth relative to the object's median
    shape_range: float = 0.08  # metres either side of the median; farther cells go to the end bins
    shape_weight: float = 0.8  # share of the shape grid in the whole vector

    def problems(self) -> list[str]:
        """What is out of range, as ``key rule`` texts (empty: usable)."""
        return [text for bad, text in (
            (min(self.hue_bins, self.saturation_bins, self.grey_bins, self.depth_bins) < 1, "histogram bins >= 1"),
            (min(self.grid_rows, self.grid_cols, self.shape_bins) < 1, "grid_rows, grid_cols, shape_bins >= 1"),
            (self.depth_range <= 0 or self.shape_range <= 0, "depth_range, shape_range > 0"),
            (not 0.0 < self.colour_weight <= 1.0, "0 < colour_weight <= 1"),
            (not 0.0 <= self.shape_weight < 1.0, "0 <= shape_weight < 1"),
        ) if bad]

    @property
    def colour_size(self) -> int:
        """Length of the colour part (the vector's first values)."""
        return self.hue_bins * self.saturation_bins + self.grey_bins

    @property
    def grid_size(self) -> int:
        """Length of the shape grid (the vector's last values)."""
        return self.grid_rows * self.grid_cols * self.shape_bins

    @property
    def size(self) -> int:
        return self.colour_size + self.depth_bins + self.grid_size


# ---------------------------------------------------------------------------------------------- classic
def rgb_to_hsv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hue in [0, 1) (0 = red), saturation and value in [0, 1] of uint8 RGB pixels (N x 3)."""
    values = np.asarray(rgb, dtype=np.float32).reshape(-1, 3) / 255.0
    r, g, b = values[:, 0], values[:, 1], values[:, 2]
    top, bottom = values.max(axis=1), values.min(axis=1)
    spread = top - bottom
    safe = np.where(spread > 0, spread, 1.0)
    hue = np.where(top == r, ((g - b) / safe) % 6.0, np.where(top == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0))
    hue = np.where(spread > 0, hue / 6.0, 0.0) % 1.0
    saturation = np.where(top > 0, spread / np.where(top > 0, top, 1.0), 0.0)
    return hue.astype(np.float32), saturation.astype(np.float32), top


def _soft_bins(values: np.ndarray, bins: int, circular: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear interpolation of ``values`` in [0, 1] onto ``bins`` bins: (lower bin, upper bin, upper weight).

    Circular bins are centred on i / bins (hue 0, red, is the centre of bin 0); others on (i + 0.5) / bins.
    """
    if circular:
        position = values * bins
        low = np.floor(position)
        return low.astype(np.int64) % bins, (low.astype(np.int64) + 1) % bins, (position - low).astype(np.float32)
    position = np.clip(values * bins - 0.5, 0.0, bins - 1.0)
    low = np.minimum(np.floor(position), bins - 1.0)
    high = np.minimum(low + 1, bins - 1.0)
    return low.astype(np.int64), high.astype(np.int64), (position - low).astype(np.float32)


def _histogram(values: np.ndarray, bins: int, circular: bool = False) -> np.ndarray:
    hist = np.zeros(bins, dtype=np.float64)
    if values.size:
        low, high, weight = _soft_bins(values, bins, circular)
        np.add.at(hist, low, 1.0 - weight)
        np.add.at(hist, high, weight)
    return hist


def _normalised(hist: np.ndarray, mass: float) -> np.ndarray:
    total = hist.sum()
    return hist * (mass / total) if total > 0 else hist


def describe(rgb: np.ndarray, depth: np.ndarray | None = None, mask: np.ndarray | None = None,
             config: DescriptorConfig | None = None) -> np.ndarray:
    """The classic descriptor of a crop (see the module docstring), float32 of length ``config.size``."""
    cfg = config or DescriptorConfig()
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise InvalidArgumentError(f"the crop must be an HxWx3 uint8 RGB image, got shape {rgb.shape} of {rgb.dtype}")
    selected = np.ones(rgb.shape[:2], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if selected.shape != rgb.shape[:2]:
        raise InvalidArgumentError(f"the mask is {selected.shape}, the crop {rgb.shape[:2]}: they must match")
    if not selected.any():
        raise InvalidArgumentError("the mask selects no pixel of the crop")
    hue, saturation, value = rgb_to_hsv(rgb[selected])
    coloured = (saturation >= cfg.min_saturation) & (value >= cfg.min_value)
    sat = (saturation[coloured] - cfg.min_saturation) / (1.0 - cfg.min_saturation)
    h_low, h_high, h_w = _soft_bins(hue[coloured], cfg.hue_bins, circular=True)
    s_low, s_high, s_w = _soft_bins(sat, cfg.saturation_bins, circular=False)
    colour = np.zeros((cfg.hue_bins, cfg.saturation_bins), dtype=np.float64)
    for h_index, h_weight in ((h_low, 1.0 - h_w), (h_high, h_w)):
        for s_index, s_weight in ((s_low, 1.0 - s_w), (s_high, s_w)):
            np.add.at(colour, (h_index, s_index), h_weight * s_weight)
    grey = _histogram(value[~coloured], cfg.grey_bins)
    rest = 1.0 - cfg.shape_weight
    colour_part = _normalised(np.concatenate([colour.ravel(), grey]), rest * cfg.colour_weight)

    depth_part = np.zeros(cfg.depth_bins, dtype=np.float64)
    grid_part = np.zeros(cfg.grid_size, dtype=np.float64)
    if depth is not None:
        depth = np.asarray(depth, dtype=np.float64)
        if depth.shape != rgb.shape[:2]:
            raise InvalidArgumentError(f"the depth crop is {depth.shape}, the RGB crop {rgb.shape[:2]}: they must match")
        valid = selected & np.isfinite(depth) & (depth > 0)
        if valid.any():
            offsets = depth[valid] - np.median(depth[valid])
            depth_hist = _histogram(np.clip((offsets + cfg.depth_range) / (2 * cfg.depth_range), 0.0, 1.0), cfg.depth_bins)
            depth_part = _normalised(depth_hist, rest * (1.0 - cfg.colour_weight))
            grid_part = _normalised(shape_grid(selected, valid, depth - np.median(depth[valid]), cfg), cfg.shape_weight)
    return np.concatenate([colour_part, depth_part, grid_part]).astype(np.float32)


def shape_grid(selected: np.ndarray, valid: np.ndarray, offsets: np.ndarray, cfg: DescriptorConfig) -> np.ndarray:
    """The shape grid (unnormalised, ``cfg.grid_size`` values): the selected pixels' tight box cut into
    ``grid_rows`` x ``grid_cols`` cells; per cell, its mean relative depth ``offsets`` (metres, over the
    ``valid`` pixels) soft-binned into ``shape_bins`` bins, weighted by the share of the cell the object fills."""
    rows, cols = np.nonzero(selected)
    top, left = rows.min(), cols.min()
    height, width = rows.max() - top + 1, cols.max() - left + 1
    cell_rows = np.minimum((rows - top) * cfg.grid_rows // height, cfg.grid_rows - 1)
    cell_cols = np.minimum((cols - left) * cfg.grid_cols // width, cfg.grid_cols - 1)
    cells = cfg.grid_rows * cfg.grid_cols
    cell = cell_rows * cfg.grid_cols + cell_cols
    filled = np.bincount(cell, minlength=cells).astype(np.float64)
    deep = valid[rows, cols]
    counted = np.bincount(cell[deep], minlength=cells).astype(np.float64)
    total = np.bincount(cell[deep], weights=offsets[rows[deep], cols[deep]], minlength=cells)
    mean = np.divide(total, counted, out=np.zeros(cells), where=counted > 0)
    # a cell's pixel area: the box's rows and columns split as evenly as the integer cut above splits them
    row_edges = -(-np.arange(cfg.grid_rows + 1) * height // cfg.grid_rows)
    col_edges = -(-np.arange(cfg.grid_cols + 1) * width // cfg.grid_cols)
    area = np.outer(np.diff(row_edges), np.diff(col_edges)).ravel().astype(np.float64)
    coverage = np.divide(filled, area, out=np.zeros(cells), where=area > 0) * (counted > 0)
    low, high, weight = _soft_bins(np.clip((mean + cfg.shape_range) / (2 * cfg.shape_range), 0.0, 1.0), cfg.shape_bins, circular=False)
    grid = np.zeros((cells, cfg.shape_bins), dtype=np.float64)
    index = np.arange(cells)
    np.add.at(grid, (index, low), coverage * (1.0 - weight))
    np.add.at(grid, (index, high), coverage * weight)
    return grid.ravel()


def similarity(a: Any, b: Any) -> float:
    """Histogram intersection of two classic descriptors, normalised by the smaller mass: in [0, 1].

    1.0: the same colours (and depth shape); 0.0: nothing in common. When one side has no depth part,
    only the colours are compared. Vectors of different lengths raise InvalidArgumentError.
    """
    first, second = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if first.shape != second.shape or first.ndim != 1:
        raise InvalidArgumentError(f"descriptors of shapes {first.shape} and {second.shape} cannot be compared; "
                                   "they come from different descriptor settings")
    mass = min(first.sum(), second.sum())
    return float(np.clip(np.minimum(first, second).sum() / mass, 0.0, 1.0)) if mass > 0 else 0.0


def cosine(a: Any, b: Any) -> float:
    """Cosine similarity of two vectors, in [-1, 1] (0.0 when either is zero)."""
    first, second = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if first.shape != second.shape:
        raise InvalidArgumentError(f"embeddings of sizes {first.size} and {second.size} cannot be compared; they come "
                                   "from different image models")
    norms = float(np.linalg.norm(first) * np.linalg.norm(second))
    return float(np.clip(first @ second / norms, -1.0, 1.0)) if norms > 0 else 0.0


class ColourDepthDescriptor:
    """The classic descriptor as an ``ImageEmbedder`` (histogram intersection)."""

    metric = INTERSECTION

    def __init__(self, config: DescriptorConfig | None = None) -> None:
        self.config = config or DescriptorConfig()
        c = self.config
        if c.problems():
            raise ConfigError(f"knowledge.descriptor: need {', '.join(c.problems())} (see config/knowledge.yaml)")
        self.name = (f"hsv-depth-shape-v2:h{c.hue_bins}s{c.saturation_bins}g{c.grey_bins}d{c.depth_bins}"
                     f"r{c.depth_range:g}w{c.colour_weight:g}:grid{c.grid_rows}x{c.grid_cols}b{c.shape_bins}"
                     f"r{c.shape_range:g}w{c.shape_weight:g}")

    def embed(self, rgb: np.ndarray, depth: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        return describe(rgb, depth, mask, self.config)

    def similarity(self, a: Any, b: Any) -> float:
        return similarity(a, b)


def crop_object(rgb: np.ndarray, depth: np.ndarray | None, segmentation: np.ndarray, instance: int,
                pad: int = 2) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The bounding box of the pixels whose segmentation id is ``instance`` (plus ``pad`` pixels): RGB, depth, mask."""
    selected = np.asarray(segmentation) == instance
    if not selected.any():
        raise InvalidArgumentError(f"segment {instance} is not visible in the frame")
    rows, cols = np.nonzero(selected)
    top, bottom = max(rows.min() - pad, 0), min(rows.max() + pad + 1, selected.shape[0])
    left, right = max(cols.min() - pad, 0), min(cols.max() + pad + 1, selected.shape[1])
    box = (slice(top, bottom), slice(left, right))
    return np.ascontiguousarray(rgb[box]), (None if depth is None else np.ascontiguousarray(depth[box])), selected[box]


# ---------------------------------------------------------------------------------------------- learned
class TransformersImageEmbedder:
    """A CLIP vision tower (``CLIPVisionModelWithProjection``; also from a whole CLIP checkpoint) or an
    ``AutoModel`` backbone such as DINOv2, with its ``AutoImageProcessor``, from a local directory.

    Pixels outside the mask are set to the processor's mean colour, so the table around an object does
    not count. Loaded on first use; nothing is downloaded (``local_files_only``).
    """

    metric = COSINE

    def __init__(self, model_path: str | Path, name: str = "", device: str = "cpu") -> None:
        path = Path(model_path).expanduser()
        if not (path / "config.json").is_file():
            what = "does not exist" if not path.exists() else "holds no config.json (not a transformers model directory)"
            raise ConfigError(f"image embedder: {path} {what}; point it at a local CLIP or DINOv2 directory "
                              "(teachbot never downloads weights)")
        self.model_path = path
        self.name = name or f"transformers:{path.name}"
        self.device = device
        self._model: Any = None
        self._processor: Any = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._model is None:
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ["TRANSFORMERS_OFFLINE"] = "1"
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                from transformers import AutoConfig, AutoImageProcessor, AutoModel, CLIPVisionModelWithProjection  # deferred: transformers
                from transformers.utils import logging as hf_logging  # deferred: transformers

                config = AutoConfig.from_pretrained(self.model_path, local_files_only=True)
                verbosity = hf_logging.get_verbosity()
                hf_logging.set_verbosity_error()  # a whole CLIP checkpoint: the text tower's weights are not needed (no report)
                try:
                    if config.model_type == "clip":  # the vision tower and its projection out of a whole CLIP model
                        vision = config.vision_config
                        vision.projection_dim = config.projection_dim
                        model = CLIPVisionModelWithProjection.from_pretrained(self.model_path, config=vision, local_files_only=True)
                    elif config.model_type == "clip_vision_model":
                        model = CLIPVisionModelWithProjection.from_pretrained(self.model_path, local_files_only=True)
                    else:
                        model = AutoModel.from_pretrained(self.model_path, local_files_only=True)
                finally:
                    hf_logging.set_verbosity(verbosity)
                try:  # the PIL backend: torchvision is not installed (see requirements/base.txt)
                    processor = AutoImageProcessor.from_pretrained(self.model_path, local_files_only=True, backend="pil")
                except TypeError:  # a transformers without backends
                    processor = AutoImageProcessor.from_pretrained(self.model_path, local_files_only=True)
                self._model, self._processor = model.to(self.device).eval(), processor
            return self._model, self._processor

    @property
    def dim(self) -> int:
        """Length of the vectors (loads the model)."""
        model, _ = self._load()
        config = model.config
        return int(getattr(config, "projection_dim", 0) if hasattr(model, "visual_projection") else config.hidden_size)

    def embed(self, rgb: np.ndarray, depth: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """The L2-normalised embedding of the crop (``depth`` is not used)."""
        import torch  # deferred: torch

        rgb = np.asarray(rgb)
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or rgb.size == 0:
            raise InvalidArgumentError(f"the crop must be an HxWx3 uint8 RGB image, got shape {rgb.shape} of {rgb.dtype}")
        model, processor = self._load()
        if mask is not None:
            mean = np.asarray(getattr(processor, "image_mean", None) or (0.5, 0.5, 0.5), dtype=np.float64)
            rgb = np.where(np.asarray(mask, dtype=bool)[..., None], rgb, np.round(mean * 255).astype(np.uint8))
        inputs = processor(images=[rgb], return_tensors="pt")
        with torch.inference_mode():
            output = model(pixel_values=inputs["pixel_values"].to(self.device))
        vector = getattr(output, "image_embeds", None)
        if vector is None:
            vector = getattr(output, "pooler_output", None)
        if vector is None:
            vector = output.last_hidden_state[:, 0]
        vector = vector[0].float().cpu().numpy()
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm > 0 else vector).astype(np.float32)

    def similarity(self, a: Any, b: Any) -> float:
        return cosine(a, b)
