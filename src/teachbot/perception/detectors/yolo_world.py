"""YOLO-World (ultralytics) open-vocabulary detector; class text embeddings from a local CLIP text model.

ultralytics' own ``set_classes`` builds OpenAI CLIP and downloads its weights. Instead the queries are
embedded here by a transformers ``CLIPTextModelWithProjection`` loaded from a local directory (the
same ViT-B/32 text tower YOLO-World was trained with: L2-normalised 512-d projections) and handed to
the model as its ``txt_feats``.

Inference runs ultralytics' own pieces directly (checkpoint loader, LetterBox, the model, NMS, box
scaling) rather than ``YOLO.predict``: the predictor's warm-up imports torchvision unconditionally,
and this project installs no torchvision (its registry wheels need a CUDA torch; see
requirements/torchvision-placeholder/README.md). Without torchvision imported, ultralytics' NMS runs
its pure-torch ``TorchNMS``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.perception.detector import Detection, Frame
from teachbot.perception.detectors.common import (
    MissingWeightsError,
    frame_rgb,
    resolve_local_path,
    set_torch_threads,
    to_detections,
    unique_queries,
)

KEY = "perception.backends.yolo_world"

# Read by ultralytics when it is first imported: no connectivity probes or telemetry, and never a
# pip install of a missing package at run time.
os.environ["YOLO_OFFLINE"] = "1"
os.environ["YOLO_AUTOINSTALL"] = "false"
os.environ.setdefault("YOLO_VERBOSE", "false")


class ClipTextEncoder:
    """L2-normalised CLIP text embeddings from a local transformers directory, cached per query."""

    def __init__(self, path: str | Path, device: str = "cpu") -> None:
        import torch  # deferred: torch
        from transformers import AutoTokenizer, CLIPTextModelWithProjection  # deferred: transformers

        self._torch = torch
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = CLIPTextModelWithProjection.from_pretrained(str(path), local_files_only=True)
        self.model.to(self.device).eval()
        self.dim = int(self.model.config.projection_dim)
        self._cache: dict[str, Any] = {}

    def embed(self, texts: Sequence[str]) -> Any:
        """(len(texts), dim) float32 tensor of unit-norm text embeddings."""
        torch = self._torch
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            tokens = self.tokenizer(missing, padding=True, truncation=True, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                feats = self.model(**tokens).text_embeds.float()
            feats = torch.nn.functional.normalize(feats, dim=-1)
            self._cache.update(zip(missing, feats, strict=True))
        return torch.stack([self._cache[t] for t in texts])


def text_embedding_dim(model: Any) -> int:
    """The text-embedding width a YOLO-World model's text-guided layers take (512 for CLIP ViT-B/32)."""
    from ultralytics.nn.modules.block import ImagePoolingAttn, MaxSigmoidAttnBlock  # deferred: ultralytics

    for m in model.modules():
        if isinstance(m, MaxSigmoidAttnBlock):
            return int(m.gl.in_features)
        if isinstance(m, ImagePoolingAttn):
            return int(m.query[1].in_features)
    return int(model.txt_feats.shape[-1])


def load_world_model(path: str | Path, device: str = "cpu") -> Any:
    """The ultralytics WorldModel in a local checkpoint (.pt), as float32, fused, in eval mode."""
    from ultralytics import YOLOWorld  # deferred: ultralytics
    from ultralytics.nn.tasks import WorldModel  # deferred: ultralytics

    model = YOLOWorld(str(path)).model
    if not isinstance(model, WorldModel):
        raise MissingWeightsError(f"{KEY}.weights: {path} holds a {type(model).__name__}, not a YOLO-World model")
    model = model.float().to(device).eval()
    return model.fuse(verbose=False)


class YoloWorldDetector:
    """Open-vocabulary detection with YOLO-World; the queries become the model's classes."""

    name = "yolo_world"

    def __init__(
        self,
        weights: str,
        clip_text_model: str,
        image_size: int = 640,
        conf: float = 0.05,
        iou: float = 0.7,
        max_det: int = 100,
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        """Load ``weights`` (a local ultralytics YOLO-World checkpoint, e.g. yolov8s-worldv2.pt) and the CLIP
        text model directory ``clip_text_model`` (e.g. openai/clip-vit-base-patch32). ``conf`` is the lowest
        score kept (the node applies ``perception.min_score`` on top), ``iou`` the NMS overlap threshold,
        ``image_size`` the longer side the image is letterboxed to, ``threads`` torch's CPU threads (None:
        torch's default)."""
        import torch  # deferred: torch

        set_torch_threads(threads)
        self._torch = torch
        weights_path = resolve_local_path(weights, f"{KEY}.weights", "file")
        clip_path = resolve_local_path(clip_text_model, f"{KEY}.clip_text_model", "dir")
        self.device = torch.device(device)
        self.model = load_world_model(weights_path, device)
        self.text = ClipTextEncoder(clip_path, device)
        want = text_embedding_dim(self.model)
        if self.text.dim != want:
            raise MissingWeightsError(
                f"{KEY}.clip_text_model: {clip_path} embeds text in {self.text.dim} dimensions but the YOLO-World "
                f"model at {weights_path} expects {want} (CLIP ViT-B/32, e.g. openai/clip-vit-base-patch32)"
            )
        self.image_size = int(image_size)
        self.conf, self.iou, self.max_det = float(conf), float(iou), int(max_det)
        self.stride = int(max(self.model.stride.max().item(), 32))
        self._classes: tuple[str, ...] = ()
        self._lock = threading.Lock()  # the model's classes are state: one detect at a time

    def set_classes(self, queries: Sequence[str]) -> None:
        """Make ``queries`` the model's classes (text embeddings from the CLIP text model)."""
        classes = tuple(queries)
        if classes == self._classes:
            return
        feats = self.text.embed(classes).to(self.device)
        self.model.txt_feats = feats.reshape(1, len(classes), feats.shape[-1])
        self.model.model[-1].nc = len(classes)
        self.model.names = dict(enumerate(classes))
        self._classes = classes

    def preprocess(self, rgb: np.ndarray) -> Any:
        """Letterboxed (longer side ``image_size``, sides multiples of the stride) 1x3xHxW float tensor in 0..1."""
        from ultralytics.data.augment import LetterBox  # deferred: ultralytics

        boxed = LetterBox(self.image_size, auto=True, stride=self.stride)(image=rgb)
        x = self._torch.from_numpy(np.ascontiguousarray(boxed.transpose(2, 0, 1))).to(self.device)
        return x.float().div_(255.0).unsqueeze(0)

    def detect(self, frame: Frame, queries: Sequence[str]) -> list[Detection]:
        """Detections of ``queries`` in ``frame`` (label = the query), best first."""
        from ultralytics.utils.nms import non_max_suppression  # deferred: ultralytics
        from ultralytics.utils.ops import scale_boxes  # deferred: ultralytics

        rgb = frame_rgb(frame)
        classes = unique_queries(queries)
        if not classes:
            return []
        with self._lock, self._torch.inference_mode():
            self.set_classes(classes)
            x = self.preprocess(rgb)
            pred = self.model(x)
            det = non_max_suppression(
                pred, conf_thres=self.conf, iou_thres=self.iou, max_det=self.max_det, nc=len(classes)
            )[0]
            boxes = scale_boxes(x.shape[2:], det[:, :4].clone(), rgb.shape[:2])
        height, width = rgb.shape[:2]
        return to_detections(boxes.cpu().numpy(), det[:, 4].cpu().numpy(), det[:, 5].cpu().numpy(), classes, width, height)
