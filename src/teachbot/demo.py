"""``teachbot demo``: the sim and skills nodes come up headless, a short scripted sequence of skills
runs through their actions (printed like the console the LLM will drive), and pictures of the scene
from the camera topic, before and after, are written to a directory that is printed at the end."""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from sensor_msgs.msg import Image

from teachbot.config import load_yaml
from teachbot.nodes.common import SENSOR_QOS
from teachbot.nodes.stack import InProcessStack
from teachbot.paths import config_path

DEFAULT_SCENE = "scenes/example.yaml"


class CameraGrabber:
    """Keeps the latest colour image of the camera topic with its stamp."""

    def __init__(self, node) -> None:  # noqa: ANN001 - any rclpy node
        self._latest: tuple[float, np.ndarray] | None = None
        self._event = threading.Event()
        node.create_subscription(Image, "camera/color/image_raw", self._on_image, SENSOR_QOS)

    def _on_image(self, msg: Image) -> None:
        array = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.width, 3)
        self._latest = (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, array)
        self._event.set()

    def frame_after(self, sim_time: float, timeout: float = 20.0) -> np.ndarray:
        """The first frame stamped at or after ``sim_time`` (simulated seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._latest is not None and self._latest[0] >= sim_time:
                return self._latest[1]
            self._event.clear()
            self._event.wait(0.1)
        raise TimeoutError("no camera image arrived; is the sim node's camera enabled?")


def _say(line: str) -> None:
    print(line, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    scene = args.scene or ("" if args.seed is not None else str(config_path(DEFAULT_SCENE)))
    overrides: dict[str, object] = {"real_time_factor": 0.0, "camera_rate": 2.0}
    if scene:
        overrides["scene_file"] = str(Path(scene).resolve())
    if args.seed is not None:
        overrides["seed"] = args.seed
    stack = InProcessStack(args.robot_profile, **overrides)
    started = time.monotonic()
    _say("starting the sim and skills nodes (headless, loopback-only DDS) ...")
    client = stack.start()
    grabber = CameraGrabber(stack.client_node)
    try:
        _say(f"ready in {time.monotonic() - started:.1f} s\n")
        state = client.world_state()
        names = [o.name for o in state.objects]
        blocks = [n for n in names if n.endswith(" block")]
        bowls = [n for n in names if n.endswith(" bowl")]
        _say(">>> get_obj_names()")
        _say(repr(names))
        PILImage.fromarray(grabber.frame_after(state.sim_time)).save(out / "before.png")
        corner = "top left corner"
        corner_xy = load_yaml(config_path("tabletop.yaml"))["workspace"]["named_points"][corner]
        steps: list[tuple[str, str, dict]] = [("put_first_on_second", f"put_first_on_second({blocks[0]!r}, {bowls[0]!r})",
                                               {"object_name": blocks[0], "target_name": bowls[0]})]
        if len(blocks) > 1:
            steps.append(("put_first_on_second", f"put_first_on_second({blocks[1]!r}, {corner!r})",
                          {"object_name": blocks[1], "target_point": corner_xy}))
        steps.append(("go_home", "go_home()", {}))
        failures = 0
        for skill, shown, fields in steps:
            _say(f">>> {shown}")
            t0 = time.monotonic()
            result = client.call(skill, **fields)
            _say(repr("success" if result.success else result.message) + f"    # {time.monotonic() - t0:.2f} s")
            failures += not result.success
        final = client.world_state()
        PILImage.fromarray(grabber.frame_after(final.sim_time)).save(out / "after.png")
        _say("\nground truth after the run:")
        for o in final.objects:
            where = f"in {o.supported_by}" if o.inside else (f"on {o.supported_by}" if o.supported_by else "on the table")
            p = o.pose.position
            _say(f"  {o.name:14s} ({p.x:+.3f}, {p.y:+.3f}, {p.z:.3f})  {where}")
        _say(f"\npictures: {out / 'before.png'} and {out / 'after.png'}")
        return 1 if failures else 0
    finally:
        stack.stop()
