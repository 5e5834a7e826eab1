#!/usr/bin/env python3
"""Per-frame detector latency at 640x480 on this CPU, for each perception backend.

The frame is a rendered tabletop scene (teachbot.sim, generate_scene(0), camera from config/sim.yaml);
the queries are ["block", "bowl"]. Each backend is built with make_detector as the perception node
builds it; the time is one detect() call (preprocessing, model, NMS, boxes in pixels), after warm-up.

  sim_ground_truth   boxes and masks from the simulator's segmentation image     goal < 20 ms
  yolo_world         yolov8s-worldv2 architecture, random weights, image_size 640 goal < 400 ms
                     (+ CLIP ViT-B/32 text tower, random weights; embeddings cached per query)
  owlv2              owlv2-base-patch16 architecture (960x960 input), random weights; report only

The learned models are the full-size architectures written to a temporary directory by
teachbot.perception.detectors.random_models and loaded back through the backends' real loading code
(nothing is downloaded); random weights cost the same per frame as trained ones.

--tiny-models (the tiny mode's choice) builds yolov8n-worldv2 and a 2-layer, 64-wide CLIP text tower instead, as
test/test_detectors_learned.py does: the same loading and detection code in a fraction of the time, its figures
no measure of the full-size models.

Usage: python bench/perception.py [--runs 20] [--owlv2-runs 5] [--skip-owlv2] [--tiny-models] [--smoke]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

C.ensure_importable()  # no ROS here

QUERIES = ["block", "bowl"]
GOALS_MS = {"sim_ground_truth": 20.0, "yolo_world": 400.0}
TINY_CLIP = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}  # projection 512


def sim_frame() -> Any:
    """A rendered 640x480 tabletop frame with the simulator's segmentation labels."""
    from teachbot.config import load_yaml, resolve_config
    from teachbot.perception.detector import Frame
    from teachbot.robot_profile import RobotProfile
    from teachbot.sim.camera import CameraSpec
    from teachbot.sim.world import TabletopWorld
    from teachbot.world.scene import TabletopConfig, generate_scene

    camera = CameraSpec.from_config(load_yaml(resolve_config("sim")).get("camera", {}))
    table = TabletopConfig.load()
    world = TabletopWorld(RobotProfile.load("panda_sim"), table)
    try:
        world.reset(generate_scene(0, table))
        world.step(120)  # let the objects settle
        f = world.render(camera)
        labels = {o.body_id: {"category": o.category, "color": o.color, "name": o.name} for o in world.objects()}
    finally:
        world.close()
    return Frame(f.rgb, f.depth, f.segmentation, labels, 0.0)


def time_detector(detector: Any, frame: Any, runs: int, warmup: int) -> tuple[list[float], int]:
    """Milliseconds per detect() over ``runs`` calls after ``warmup`` calls; and the detections of the last."""
    for _ in range(warmup):
        detector.detect(frame, QUERIES)
    times, dets = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        dets = detector.detect(frame, QUERIES)
        times.append(1e3 * (time.perf_counter() - t0))
    return times, len(dets)


def row(name: str, times: list[float], n_dets: int, extra: str = "") -> dict[str, Any]:
    s = C.summary(times, 1)
    goal = GOALS_MS.get(name)
    verdict = f"goal < {goal:g} ms: {'met' if s['median'] < goal else 'MISSED'}" if goal else "report only"
    C.say(f"{name:17s} median {s['median']:8.1f} ms  (min {s['min']:.1f}, max {s['max']:.1f}, n={s['n']}); "
          f"{n_dets} detections; {verdict}{extra}")
    out: dict[str, Any] = {"ms": s, "median_ms": s["median"], "detections": n_dets}
    if goal:
        out.update(C.goal_fields(s["median"], goal))
    return out


def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=20, smoke={"runs": 1, "skip_owlv2": True, "tiny_models": True})
    p.add_argument("--owlv2-runs", type=int, default=5, help="repetitions for owlv2 (default 5: seconds each)")
    p.add_argument("--skip-owlv2", action="store_true", help="leave out the owlv2 row")
    p.add_argument("--tiny-models", action="store_true", help="yolov8n-worldv2 and a tiny CLIP text tower (yolo_world row)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads for the learned backends "
                   "(default: torch's default, one per core)")
    args = p.parse_args()
    machine = C.machine()

    import torch

    from teachbot.perception.detector import make_detector
    from teachbot.perception.detectors import random_models

    frame = sim_frame()
    h, w = frame.rgb.shape[:2]
    threads = args.threads or torch.get_num_threads()
    C.say(f"frame {w}x{h} (scene 0, {len(frame.segment_labels)} labelled objects); queries {QUERIES}; "
          f"torch {torch.__version__}, {threads} threads; load average {os.getloadavg()[0]:.2f}")
    rows: dict[str, Any] = {}

    det = make_detector("sim_ground_truth")
    times, n = time_detector(det, frame, max(args.runs, 50), warmup=3)
    rows["sim_ground_truth"] = row("sim_ground_truth", times, n)

    with tempfile.TemporaryDirectory(prefix="bench-perception-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        arch = "yolov8n-worldv2" if args.tiny_models else "yolov8s-worldv2"
        weights = random_models.save_yolo_world(root / f"{arch}.pt", f"{arch}.yaml")
        clip = random_models.save_clip_text_model(root / "clip-text", **(TINY_CLIP if args.tiny_models else {}))
        t_save = time.perf_counter() - t0
        t0 = time.perf_counter()
        det = make_detector("yolo_world", {"weights": str(weights), "clip_text_model": str(clip), "image_size": 640,
                                            "threads": args.threads})
        t_load = time.perf_counter() - t0
        params = sum(p.numel() for p in det.model.parameters())
        t0 = time.perf_counter()
        det.detect(frame, QUERIES)  # first call: embeds the queries, warms the kernels
        t_first = time.perf_counter() - t0
        times, n = time_detector(det, frame, args.runs, warmup=2)
        rows["yolo_world"] = row("yolo_world", times, n, f"; {params / 1e6:.1f} M params (fused), input "
                                 f"{tuple(det.preprocess(frame.rgb).shape[2:])}, load {t_load:.1f} s, first call "
                                 f"{t_first * 1e3:.0f} ms")
        rows["yolo_world"].update(params_m=round(params / 1e6, 2), load_s=round(t_load, 2), save_s=round(t_save, 2),
                                  first_call_ms=round(t_first * 1e3, 1))
        del det

        if not args.skip_owlv2:
            model_dir = random_models.save_owlv2(root / "owlv2-base-patch16")
            t0 = time.perf_counter()
            det = make_detector("owlv2", {"model_path": str(model_dir), "threads": args.threads})
            t_load = time.perf_counter() - t0
            params = sum(p.numel() for p in det.model.parameters())
            times, n = time_detector(det, frame, args.owlv2_runs, warmup=1)
            rows["owlv2"] = row("owlv2", times, n, f"; {params / 1e6:.1f} M params, input 960x960, load {t_load:.1f} s")
            rows["owlv2"].update(params_m=round(params / 1e6, 2), load_s=round(t_load, 2))
            del det

    yw = rows["yolo_world"]
    C.emit({
        "benchmark": "perception", "unit": "ms_per_frame", "frame": [w, h], "queries": QUERIES,
        "headline": "yolo_world_median_ms", "median": yw["median_ms"], "goal": GOALS_MS["yolo_world"], "ratio": yw["ratio"],
        "meets_goal": yw["meets_goal"] and rows["sim_ground_truth"]["meets_goal"],
        "backends": rows, "tiny_models": args.tiny_models, "torch_threads": torch.get_num_threads(), "machine": machine,
        "loadavg_1min_end": round(os.getloadavg()[0], 2),  # other work on the CPU inflates every row
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
