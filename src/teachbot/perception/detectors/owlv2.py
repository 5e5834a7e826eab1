"""OWLv2 (transformers) open-vocabulary detector, weights and processor from a local directory.

The directory is what ``save_pretrained`` writes, e.g. a copy of google/owlv2-base-patch16-ensemble:
config.json, model.safetensors, preprocessor_config.json and the CLIP tokenizer files. The image is
padded to a square and resized to the model's input size by the processor; boxes come back in the
input image's pixels. OWLv2 scores every image patch independently, so overlapping boxes of one
query are merged here by per-query NMS.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from teachbot.perception.detector import Detection, Frame
from teachbot.perception.detectors.common import (
    MissingWeightsError,
    batched_nms,
    frame_rgb,
    resolve_local_path,
    set_torch_threads,
    to_detections,
    unique_queries,
)

KEY = "perception.backends.owlv2"


class Owlv2Detector:
    """Open-vocabulary detection with OWLv2; each query is one text prompt."""

    name = "owlv2"

    def __init__(
        self,
        model_path: str,
        threshold: float = 0.1,
        nms_iou: float = 0.3,
        max_det: int = 100,
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        """Load model and processor from the local directory ``model_path``. ``threshold`` is the lowest
        score kept (the node applies ``perception.min_score`` on top), ``nms_iou`` the overlap above which
        a lower-scoring box of the same query is dropped, ``threads`` torch's CPU threads (None: torch's
        default)."""
        import torch  # deferred: torch
        from transformers import Owlv2ForObjectDetection, Owlv2Processor  # deferred: transformers

        path = resolve_local_path(model_path, f"{KEY}.model_path", "dir")
        set_torch_threads(threads)
        try:
            self.processor = Owlv2Processor.from_pretrained(str(path), local_files_only=True)
            self.model = Owlv2ForObjectDetection.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as e:
            raise MissingWeightsError(
                f"{KEY}.model_path: {path} is not a complete OWLv2 directory (config.json, model weights, "
                f"preprocessor_config.json, tokenizer files): {e}"
            ) from e
        self._torch = torch
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        self.threshold, self.nms_iou, self.max_det = float(threshold), float(nms_iou), int(max_det)
        self._lock = threading.Lock()

    def detect(self, frame: Frame, queries: Sequence[str]) -> list[Detection]:
        """Detections of ``queries`` in ``frame`` (label = the query), best first."""
        rgb = frame_rgb(frame)
        classes = unique_queries(queries)
        if not classes:
            return []
        height, width = rgb.shape[:2]
        inputs = self.processor(text=[classes], images=rgb, return_tensors="pt").to(self.device)
        with self._lock, self._torch.inference_mode():
            outputs = self.model(**inputs)
            result: dict[str, Any] = self.processor.post_process_grounded_object_detection(
                outputs, threshold=self.threshold, target_sizes=[(height, width)]
            )[0]
            boxes, scores, labels = result["boxes"].float(), result["scores"].float(), result["labels"]
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, width)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, height)
            keep = batched_nms(boxes, scores, labels, self.nms_iou)[: self.max_det]
        return to_detections(
            boxes[keep].cpu().numpy(), scores[keep].cpu().numpy(), labels[keep].cpu().numpy(), classes, width, height
        )
