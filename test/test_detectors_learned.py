"""Learned detector backends (yolo_world, owlv2) through their real loading and inference code, offline.

The models are the real architectures (small variants) with random weights, written to disk in the
formats the backends read and loaded back through ``make_detector``: what is checked is plumbing
(output types, shapes, coordinate frames, the CLIP text-embedding path), not accuracy. NMS is
checked against a plain reference implementation.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, InvalidArgumentError
from teachbot.paths import config_path
from teachbot.perception.detector import BACKENDS, Detection, Frame, make_detector
from teachbot.perception.detectors import random_models
from teachbot.perception.detectors.common import MissingWeightsError, batched_nms, nms

H, W = 480, 640
TINY_CLIP = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY_OWLV2 = {
    "text_config": {**TINY_CLIP, "max_position_embeddings": 16},
    "vision_config": {**TINY_CLIP, "image_size": 128, "patch_size": 16},
    "projection_dim": 64,
}
QUERIES = ["red block", "bowl", "block"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("learned_models")
    return {
        "yolo_world": random_models.save_yolo_world(root / "yolov8n-worldv2.pt", "yolov8n-worldv2.yaml"),
        "clip": random_models.save_clip_text_model(root / "clip", **TINY_CLIP),  # projection_dim 512
        "owlv2": random_models.save_owlv2(root / "owlv2", config=TINY_OWLV2),
    }


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, (H, W, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def yolo(models):
    # conf far below the random head's scores (~4.5e-5, the prior-initialised class bias) so detections exist
    return make_detector(
        "yolo_world",
        {"weights": str(models["yolo_world"]), "clip_text_model": str(models["clip"]), "image_size": 320,
         "conf": 1e-9, "max_det": 50},
    )


@pytest.fixture(scope="module")
def owl(models):
    return make_detector("owlv2", {"model_path": str(models["owlv2"]), "threshold": 0.0, "max_det": 40})


def check_detections(dets: list[Detection], queries: list[str], max_det: int) -> None:
    assert 0 < len(dets) <= max_det
    assert all(isinstance(d, Detection) for d in dets)
    assert {d.label for d in dets} <= set(queries)
    assert [d.score for d in dets] == sorted((d.score for d in dets), reverse=True)
    for d in dets:
        assert isinstance(d.score, float) and 0.0 <= d.score <= 1.0
        assert d.mask is None and len(d.box) == 4 and all(isinstance(v, float) for v in d.box)
        x0, y0, x1, y1 = d.box
        assert 0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H


def reference_nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Textbook greedy NMS, one box at a time."""
    order = list(np.argsort(-scores, kind="stable"))
    keep: list[int] = []
    while order:
        i = order.pop(0)
        keep.append(i)
        rest = []
        for j in order:
            ix = max(0.0, min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            iy = max(0.0, min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            inter = ix * iy
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) <= iou:
                rest.append(j)
        order = rest
    return keep


def random_boxes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    xy = rng.uniform(0, 200, (n, 2))
    wh = rng.uniform(5, 80, (n, 2))
    return np.hstack([xy, xy + wh]).astype(np.float32), rng.uniform(0, 1, n).astype(np.float32)


# ---------------------------------------------------------------- install: torchvision stays absent
def test_torchvision_is_the_metadata_only_placeholder():
    """ultralytics' torchvision requirement is met by requirements/torchvision-placeholder, which installs no
    module; a registry torchvision (CUDA-linked, unloadable on the CPU torch) must not come back."""
    assert importlib.metadata.version("torchvision").endswith("+absent")
    assert importlib.util.find_spec("torchvision") is None
    assert "+cpu" in torch.__version__ or not torch.version.cuda


# ---------------------------------------------------------------- NMS
@pytest.mark.parametrize("iou", [0.3, 0.5, 0.7])
def test_nms_matches_reference(iou):
    from ultralytics.utils.nms import TorchNMS

    rng = np.random.default_rng(int(iou * 10))
    boxes, scores = random_boxes(rng, 300)
    want = reference_nms(boxes, scores, iou)
    assert 1 < len(want) < 300
    assert nms(torch.from_numpy(boxes), torch.from_numpy(scores), iou).tolist() == want
    # the NMS ultralytics runs when torchvision is not imported (our case), against the same reference
    assert TorchNMS.nms(torch.from_numpy(boxes), torch.from_numpy(scores), iou).tolist() == want


def test_batched_nms_never_suppresses_across_labels():
    rng = np.random.default_rng(3)
    boxes, scores = random_boxes(rng, 200)
    labels = rng.integers(0, 3, 200)
    kept = batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(labels), 0.4).tolist()
    want = []
    for c in range(3):
        idx = np.flatnonzero(labels == c)
        want += [int(idx[k]) for k in reference_nms(boxes[idx], scores[idx], 0.4)]
    assert sorted(kept) == sorted(want)
    assert list(scores[kept]) == sorted(scores[kept], reverse=True)
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).tolist() == []


# ---------------------------------------------------------------- yolo_world
def test_yolo_world_detects_queries(yolo, image):
    dets = yolo.detect(Frame(rgb=image), QUERIES)
    check_detections(dets, QUERIES, 50)
    assert yolo.name == "yolo_world"
    assert "torchvision" not in sys.modules  # inference never needs it


def test_yolo_world_class_embeddings_come_from_the_clip_text_model(yolo, models, image):
    from transformers import AutoTokenizer, CLIPTextModelWithProjection

    tok = AutoTokenizer.from_pretrained(str(models["clip"]))
    clip = CLIPTextModelWithProjection.from_pretrained(str(models["clip"])).eval()
    with torch.inference_mode():
        want = clip(**tok(QUERIES, padding=True, return_tensors="pt")).text_embeds
    want = torch.nn.functional.normalize(want, dim=-1)

    pairs = torch.triu_indices(len(QUERIES), len(QUERIES), offset=1)
    assert torch.cdist(want, want)[pairs[0], pairs[1]].min() > 1e-3  # one embedding per query, all distinct

    yolo.detect(Frame(rgb=image), QUERIES)
    feats = yolo.model.txt_feats
    assert feats.shape == (1, len(QUERIES), 512)  # CLIP ViT-B/32 width, what yolov8-worldv2 expects
    torch.testing.assert_close(feats[0], want, atol=1e-5, rtol=1e-5)
    assert yolo.model.model[-1].nc == len(QUERIES)

    # a different vocabulary re-embeds: two classes now, and the model's scores follow the new embeddings
    x = yolo.preprocess(image)
    with torch.inference_mode():
        pred3 = yolo.model(x)[0]
    dets = yolo.detect(Frame(rgb=image), ["bowl", "cup"])
    assert yolo.model.txt_feats.shape == (1, 2, 512) and yolo.model.model[-1].nc == 2
    with torch.inference_mode():
        pred2 = yolo.model(x)[0]
    assert pred3.shape[1] == 4 + 3 and pred2.shape[1] == 4 + 2
    assert not torch.equal(pred2[0, 4:], pred3[0, 4:6])
    # the best detection is the best (anchor, class) score of the raw output
    best = pred2[0, 4:].flatten().argmax().item()
    assert dets[0].score == pytest.approx(pred2[0, 4:].max().item(), rel=1e-5)
    assert dets[0].label == ["bowl", "cup"][best // pred2.shape[2]]


def test_yolo_world_boxes_are_in_input_pixels(yolo, image):
    """The letterbox (640x480 -> 320x256: gain 0.5, 8 px of padding on top) is undone."""
    x = yolo.preprocess(image)
    assert x.shape == (1, 3, 256, 320) and x.dtype == torch.float32 and x.min() >= 0 and x.max() <= 1
    dets = yolo.detect(Frame(rgb=image), ["bowl"])
    with torch.inference_mode():
        pred = yolo.model(x)[0][0]
    a = pred[4].argmax().item()
    cx, cy, w, h = pred[:4, a].tolist()
    want = np.clip([(cx - w / 2) / 0.5, (cy - h / 2 - 8) / 0.5, (cx + w / 2) / 0.5, (cy + h / 2 - 8) / 0.5],
                   0, [W, H, W, H])
    np.testing.assert_allclose(dets[0].box, want, atol=1e-2)


def test_yolo_world_rejects_a_clip_model_of_the_wrong_width(models, tmp_path):
    clip256 = random_models.save_clip_text_model(tmp_path / "clip256", projection_dim=256, **TINY_CLIP)
    with pytest.raises(MissingWeightsError, match=r"clip_text_model.*256.*512"):
        make_detector("yolo_world", {"weights": str(models["yolo_world"]), "clip_text_model": str(clip256)})


# ---------------------------------------------------------------- owlv2
def test_owlv2_detects_queries(owl, image):
    dets = owl.detect(Frame(rgb=image), QUERIES)
    check_detections(dets, QUERIES, 40)
    assert owl.name == "owlv2"


def test_owlv2_best_box_matches_the_raw_model_output(owl, models, image):
    """Scores are the sigmoid of the best query logit; boxes are scaled from the padded square to pixels."""
    from transformers import Owlv2ForObjectDetection, Owlv2Processor

    processor = Owlv2Processor.from_pretrained(str(models["owlv2"]))
    model = Owlv2ForObjectDetection.from_pretrained(str(models["owlv2"])).eval()
    inputs = processor(text=[QUERIES], images=image, return_tensors="pt")
    assert inputs["pixel_values"].shape == (1, 3, 128, 128)
    with torch.inference_mode():
        out = model(**inputs)
    probs = out.logits[0].sigmoid()  # (patches, queries)
    patch, query = divmod(probs.flatten().argmax().item(), len(QUERIES))
    cx, cy, w, h = (out.pred_boxes[0, patch] * max(H, W)).tolist()  # image padded to a W x W square
    want = np.clip([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 0, [W, H, W, H])

    dets = owl.detect(Frame(rgb=image), QUERIES)
    assert dets[0].label == QUERIES[query]
    assert dets[0].score == pytest.approx(probs.max().item(), rel=1e-5)
    if want[2] > want[0] and want[3] > want[1]:  # a degenerate best box is dropped, then this does not apply
        np.testing.assert_allclose(dets[0].box, want, atol=1e-2)


# ---------------------------------------------------------------- both: inputs, config, missing weights
@pytest.mark.parametrize("backend", ["yolo_world", "owlv2"])
def test_empty_queries_and_bad_frames(backend, yolo, owl, image):
    det = {"yolo_world": yolo, "owlv2": owl}[backend]
    assert det.detect(Frame(rgb=image), []) == []
    assert det.detect(Frame(rgb=image), ["  ", ""]) == []
    with pytest.raises(InvalidArgumentError, match="HxWx3 uint8"):
        det.detect(Frame(rgb=image.astype(np.float32)), ["block"])
    with pytest.raises(InvalidArgumentError, match="HxWx3 uint8"):
        det.detect(Frame(rgb=image[:, :, 0]), ["block"])


@pytest.mark.parametrize("backend", ["yolo_world", "owlv2"])
def test_config_keys_are_constructor_arguments(backend):
    options = load_yaml(config_path("perception.yaml"))["perception"]["backends"][backend]
    module, factory = BACKENDS[backend].split(":")
    params = inspect.signature(getattr(__import__(module, fromlist=[factory]), factory)).parameters
    assert options and set(options) <= set(params)


@pytest.mark.parametrize(
    ("backend", "key", "options"),
    [
        ("yolo_world", "perception.backends.yolo_world.weights", {"weights": "{missing}/yolov8s-worldv2.pt"}),
        ("yolo_world", "perception.backends.yolo_world.clip_text_model", {"clip_text_model": "{missing}/clip"}),
        ("owlv2", "perception.backends.owlv2.model_path", {"model_path": "{missing}/owlv2"}),
        ("owlv2", "perception.backends.owlv2.model_path", {"model_path": "{empty}"}),
    ],
)
def test_missing_weights_name_the_key_and_path(backend, key, options, models, tmp_path, monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    (tmp_path / "empty").mkdir()
    base = {"yolo_world": {"weights": str(models["yolo_world"]), "clip_text_model": str(models["clip"])},
            "owlv2": {}}[backend]
    opts = {**base, **{k: v.format(missing=tmp_path / "nothing", empty=tmp_path / "empty") for k, v in options.items()}}
    path = next(iter(opts[k] for k in options))
    with pytest.raises(MissingWeightsError) as err:
        make_detector(backend, opts)
    assert isinstance(err.value, ConfigError)
    assert key in str(err.value) and path in str(err.value)


def test_threads_option_sets_torch_threads(models):
    before = torch.get_num_threads()
    try:
        det = make_detector("owlv2", {"model_path": str(models["owlv2"]), "threads": 1})
        assert torch.get_num_threads() == 1 and det.detect(Frame(rgb=np.zeros((8, 8, 3), np.uint8)), ["x"]) is not None
    finally:
        torch.set_num_threads(before)
