"""``teachbot demo``: the robot learning from a correction, headless.

With no LLM service configured it replays the shipped learning session (test/bags/learning_episode:
an instruction, its execution, the person's correction, learn_from_interaction(), and the improved
behaviour on the next request) through the whole stack in simulation, checks it against the
recording, and prints the console transcript as it runs. With an OpenAI-compatible endpoint
(OPENAI_API_KEY / OPENAI_BASE_URL, or --llm-base-url/--llm-model) it starts a live session instead:
type instructions and corrections at the ``you>`` prompt. Either way it writes pictures from the
sim's camera topic, before and after, and an animated GIF of the session to a directory it prints.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage
from sensor_msgs.msg import Image

from teachbot.llm.factory import load_llm_config, model_from_config
from teachbot.nodes.common import SENSOR_QOS
from teachbot.nodes.nodeset import apply_llm_arguments
from teachbot.paths import config_path
from teachbot.recording.bag import RecordedSession, SessionSpec
from teachbot.world.scene import TabletopConfig, load_scene_file

SHIPPED_SESSION = Path(__file__).resolve().parents[3] / "test" / "bags" / "learning_episode"  # src/teachbot/nodes/ -> the repository
GIF_WIDTH = 320
GIF_FRAME_MS = 250


class CameraGrabber:
    """Keeps the colour images of the camera topic: the latest one with its stamp, and every one, small, for a GIF."""

    def __init__(self, node: Any) -> None:
        self._latest: tuple[float, np.ndarray] | None = None
        self._event = threading.Event()
        self.frames: list[PILImage.Image] = []
        self.recording = False
        node.create_subscription(Image, "camera/color/image_raw", self.on_image, SENSOR_QOS)

    def on_image(self, msg: Image) -> None:
        """Keep the frame (and a small copy while recording the GIF)."""
        array = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.width, 3)
        self._latest = (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, array)
        if self.recording:
            image = PILImage.fromarray(array)
            self.frames.append(image.resize((GIF_WIDTH, GIF_WIDTH * msg.height // msg.width)))
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

    def save_gif(self, path: Path) -> bool:
        """Write the collected frames as an animated GIF; False when there are fewer than two."""
        if len(self.frames) < 2:
            return False
        self.frames[0].save(path, save_all=True, append_images=self.frames[1:], duration=GIF_FRAME_MS, loop=0, optimize=True)
        return True


def _say(line: str) -> None:
    print(line, flush=True)


def llm_configured(args: argparse.Namespace) -> bool:
    """An OpenAI-compatible endpoint is configured (flags or environment) and no replay was forced."""
    if getattr(args, "replay", ""):
        return False
    return bool(args.llm_base_url or args.llm_model or os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


class _Narrator:
    """Prints the transcript as it arrives, with a heading where the story of the session moves on."""

    def __init__(self) -> None:
        self.waits = 0
        self.heard = 0

    def line(self, line: str) -> None:
        if line.startswith("{'type': 'dialog'"):
            self.heard += 1
            heading = {1: "-- the person gives an instruction", 2: "-- the person corrects the robot",
                       3: "-- the next request: the robot uses what it learned"}.get(self.heard)
            if heading:
                _say(heading)
        elif line.startswith(">>> learn_from_interaction()"):
            _say("-- the robot learns from the correction (improvement LLM -> memory)")
        _say(f"  {line}")


def _pictures(console: Any, grabber: CameraGrabber, out: Path) -> None:
    state = console.stack.client.world_state()
    PILImage.fromarray(grabber.frame_after(state.sim_time)).save(out / "before.png")
    grabber.recording = True


def _finish_pictures(client: Any, grabber: CameraGrabber, out: Path) -> list[Path]:
    grabber.recording = False
    final = client.world_state()
    PILImage.fromarray(grabber.frame_after(final.sim_time)).save(out / "after.png")
    written = [out / "before.png", out / "after.png"]
    if grabber.save_gif(out / "session.gif"):
        written.append(out / "session.gif")
    _say("\nground truth after the run:")
    for o in final.objects:
        where = f"in {o.supported_by}" if o.inside else (f"on {o.supported_by}" if o.supported_by else "on the table")
        p = o.pose.position
        _say(f"  {o.name:14s} ({p.x:+.3f}, {p.y:+.3f}, {p.z:.3f})  {where}")
    return written


def run_replay_demo(args: argparse.Namespace, out: Path) -> int:
    """Replay the shipped (or given) session with pictures; exit status 1 when it diverged."""
    from teachbot.nodes.replay_check import conversation_span, replay  # deferred: pybullet

    bag = Path(args.replay or SHIPPED_SESSION)
    recorded = RecordedSession.load(bag)
    _say(f"no LLM service configured: replaying the recorded session {bag}")
    _say(f"  ({recorded.spec.title}; {len(recorded.completions)} LLM completions answered from the recording, "
         f"the person's {len(recorded.user)} utterances from the recording; recorded in {conversation_span(recorded):.1f} s)")
    _say("starting sim, skills, memory, improvement and the interaction manager (headless, loopback-only DDS) ...")
    holder: dict[str, Any] = {}

    def started(console: Any) -> None:
        holder["grabber"] = grabber = CameraGrabber(console.stack.client_node)
        holder["console"] = console
        _pictures(console, grabber, out)
        original = console.recording.stop

        def stop_with_pictures() -> Path:
            if "written" not in holder:
                holder["written"] = _finish_pictures(console.stack.client, grabber, out)
            return original()

        console.recording.stop = stop_with_pictures

    report = replay(bag, check=True, on_line=_Narrator().line, camera=True, on_started=started, timeout=args.timeout)
    _say("")
    _say(report.render())
    _say(f"replayed in {report.wall:.1f} s (conversation {report.conversation_wall:.1f} s)")
    written = holder.get("written", [])
    if written:
        _say(f"pictures: {', '.join(str(p) for p in written)}")
    return 0 if report.ok else 1


def run_live_demo(args: argparse.Namespace, out: Path) -> int:
    """A live session against the configured endpoint, typed at this terminal; pictures as in the replay."""
    from teachbot.nodes.console_stack import ConsoleStack  # deferred: pybullet

    raw = apply_llm_arguments(load_llm_config(), "openai" if args.llm_base_url or args.llm_model else "",
                              args.llm_model, args.llm_base_url)
    scene = load_scene_file(args.scene or config_path("scenes", "example.yaml"), TabletopConfig.load())
    spec = SessionSpec(scene_yaml=scene.to_yaml(), real_time_factor=1.0, title="live demo")
    console = ConsoleStack(spec, interaction_model=model_from_config(raw, "interaction"),
                           function_model=model_from_config(raw, "function_generation"),
                           improvement_model=model_from_config(raw, "improvement"), camera=True)
    _say("LLM endpoint configured: starting a live session (type an instruction at 'you>', an empty line or Ctrl-D ends it)")
    try:
        client = console.start()
        if args.record:
            _say(f"recording into {console.record(args.record).path}")
        grabber = CameraGrabber(console.stack.client_node)
        _pictures(console, grabber, out)
        person = console.converse([], on_line=lambda line: _say(f"  {line}"))
        person.leave = lambda: None
        console.start_console()
        dialog = console.interaction_manager.dialog
        while True:
            try:
                text = input("you> ").strip()
            except EOFError:
                text = ""
            if not text:
                dialog.close()
                break
            dialog.put_user(text)
        person.finished.wait(10.0)
        written = _finish_pictures(client, grabber, out)
    finally:
        console.stop()
    _say(f"pictures: {', '.join(str(p) for p in written)}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """Replay the shipped learning session, or a live session when an LLM endpoint is configured."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return run_live_demo(args, out) if llm_configured(args) else run_replay_demo(args, out)
