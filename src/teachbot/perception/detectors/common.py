"""Shared pieces of the learned detector backends: local weight paths, frame checks, box NMS.

Nothing here imports ultralytics or transformers; torch is imported only by the NMS functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.perception.detector import Detection, Frame

if TYPE_CHECKING:
    import torch


class MissingWeightsError(ConfigError):
    """A learned backend's weights are not at the local path its config names (nothing is downloaded)."""


def resolve_local_path(value: str | os.PathLike[str] | None, key: str, kind: Literal["file", "dir"]) -> Path:
    """The existing local file or directory that config key ``key`` names (``~`` and ``$VARS`` expanded).

    Raises MissingWeightsError naming the key and the path looked at; weights are never fetched from a hub.
    """
    if value is None or not str(value).strip():
        raise MissingWeightsError(f"{key} is not set; set it in config/perception.yaml to a local {kind} of weights")
    path = Path(os.path.expandvars(os.path.expanduser(str(value)))).resolve()
    ok = path.is_file() if kind == "file" else path.is_dir()
    if not ok:
        what = "file" if kind == "file" else "directory"
        found = " (it is a directory)" if kind == "file" and path.is_dir() else ""
        found = " (it is a file)" if kind == "dir" and path.is_file() else found
        raise MissingWeightsError(
            f"{key}: no {what} at {path}{found}. Put the weights there or point {key} in config/perception.yaml at "
            f"a local copy; teachbot never downloads weights at run time (see README, perception backends)."
        )
    return path


def set_torch_threads(threads: int | None) -> None:
    """Set torch's intra-op thread count for this process when ``threads`` is given (None: torch's default).

    On a CPU shared with other busy processes (sim, skills) fewer threads are often faster: torch's
    worker threads wait on each other whenever one of them is descheduled."""
    if threads is not None:
        import torch  # deferred: torch

        torch.set_num_threads(max(1, int(threads)))


def frame_rgb(frame: Frame) -> np.ndarray:
    """The frame's HxWx3 uint8 RGB image, or InvalidArgumentError saying what it got instead."""
    rgb = np.asarray(frame.rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise InvalidArgumentError(f"frame.rgb must be an HxWx3 uint8 image; got shape {rgb.shape} dtype {rgb.dtype}")
    return rgb


def unique_queries(queries: Iterable[str]) -> list[str]:
    """Queries stripped, empty ones dropped, duplicates removed (first kept), order kept."""
    return list(dict.fromkeys(q.strip() for q in queries if q and q.strip()))


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression in pure torch (what ``torchvision.ops.nms`` computes).

    ``boxes`` (N, 4) x0, y0, x1, y1; returns the indices kept, highest score first. A box is dropped when
    its IoU with a higher-scoring kept box is greater than ``iou_threshold``.
    """
    import torch  # deferred: torch

    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    order = scores.argsort(descending=True)
    boxes = boxes[order].float()
    x0, y0, x1, y1 = boxes.unbind(1)
    areas = (x1 - x0).clamp(min=0) * (y1 - y0).clamp(min=0)
    iw = (torch.minimum(x1[:, None], x1[None]) - torch.maximum(x0[:, None], x0[None])).clamp(min=0)
    ih = (torch.minimum(y1[:, None], y1[None]) - torch.maximum(y0[:, None], y0[None])).clamp(min=0)
    inter = iw * ih
    iou = inter / (areas[:, None] + areas[None] - inter).clamp(min=torch.finfo(torch.float32).tiny)
    suppress = (iou > iou_threshold).triu(diagonal=1).cpu().numpy()  # [i, j]: i outranks j and overlaps it
    keep = np.ones(len(order), dtype=bool)
    for i in range(len(order)):  # O(N) row reads; the O(N^2) IoU work above is vectorised
        if keep[i]:
            keep[suppress[i]] = False
    return order[torch.from_numpy(np.flatnonzero(keep)).to(order.device)]


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """NMS within each label separately (``torchvision.ops.batched_nms``); kept indices, best first."""
    if boxes.numel() == 0:
        return nms(boxes, scores, iou_threshold)
    # shift each label's boxes to its own region so boxes of different labels never overlap
    offsets = labels.to(boxes.dtype)[:, None] * (boxes.max() - boxes.min() + 1)
    return nms(boxes + offsets, scores, iou_threshold)


def to_detections(
    boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, queries: Sequence[str], width: int, height: int
) -> list[Detection]:
    """Detections from (N, 4) pixel boxes, (N,) scores and (N,) query indices: boxes clipped to the image,
    empty ones dropped, best first."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4).copy()
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, width)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, height)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1).clip(0.0, 1.0)
    labels = np.asarray(labels).reshape(-1).astype(int)
    out = [
        Detection(label=queries[c], score=float(s), box=(float(b[0]), float(b[1]), float(b[2]), float(b[3])))
        for b, s, c in zip(boxes, scores, labels, strict=True)
        if b[2] > b[0] and b[3] > b[1] and np.isfinite(b).all()
    ]
    out.sort(key=lambda d: d.score, reverse=True)
    return out
