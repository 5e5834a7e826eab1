"""The ``teachbot`` command: run the stack where ``ros2 launch`` is not installed, and the demo.

    teachbot sim [--gui] [--seed N | --scene FILE] [--real-time-factor X] [--robot-profile NAME] [--console]
    teachbot chat --domain-id N
    teachbot demo [--out DIR] [--scene FILE | --seed N]

Both compose the sim and skills nodes in one process on a loopback-only DDS domain.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from teachbot.errors import TeachbotError


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot-profile", default="panda_sim", help="config/robots/<name>.yaml or a path")
    parser.add_argument("--seed", type=int, default=None, help="random tabletop scene from this seed")
    parser.add_argument("--scene", default="", help="explicit scene YAML (see config/scenes/example.yaml)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teachbot", description="LLM-orchestrated robot that learns from corrections")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("sim", help="run the simulated robot: sim + skills nodes, until Ctrl-C")
    _common(sim)
    sim.add_argument("--gui", action="store_true", help="open the PyBullet window (needs a display)")
    sim.add_argument("--real-time-factor", type=float, default=1.0, help="simulated seconds per wall second; 0 = as fast as possible")
    sim.add_argument("--no-camera", action="store_true", help="do not render or publish camera images")
    sim.add_argument("--console", action="store_true",
                     help="also run the interaction manager (LLM from config/llm.yaml; OPENAI_API_KEY/OPENAI_BASE_URL)")
    sim.add_argument("--llm-config", default="", help="LLM config file (default config/llm.yaml)")
    chat = sub.add_parser("chat", help="talk to the robot from this terminal (needs a running interaction manager)")
    chat.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID the robot runs on (printed by teachbot sim)")
    chat.add_argument("--quiet", action="store_true", help="do not print the console transcript, only the dialog")
    demo = sub.add_parser("demo", help="headless scripted skill sequence with before/after pictures")
    _common(demo)
    demo.add_argument("--out", default="out/demo", help="directory for the pictures (default: out/demo)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from teachbot.ros_env import configure_loopback

    if args.command == "chat":
        if args.domain_id is not None:
            os.environ["ROS_DOMAIN_ID"] = str(args.domain_id)
        if not os.environ.get("ROS_DOMAIN_ID"):
            print("error: set --domain-id (or ROS_DOMAIN_ID) to the id `teachbot sim` printed", file=sys.stderr)
            return 2
    configure_loopback()
    try:
        if args.command == "sim":
            return run_sim(args)
        if args.command == "chat":
            from teachbot.chat import run_chat

            return run_chat(args)
        from teachbot.demo import run_demo

        return run_demo(args)
    except TeachbotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _scene_overrides(args: argparse.Namespace) -> dict[str, object]:
    overrides: dict[str, object] = {}
    if args.scene:
        overrides["scene_file"] = str(Path(args.scene).resolve())
    if args.seed is not None:
        overrides["seed"] = args.seed
    return overrides


def run_sim(args: argparse.Namespace) -> int:
    from teachbot.nodes.stack import InProcessStack

    stack = InProcessStack(
        args.robot_profile, real_time_factor=args.real_time_factor, gui=args.gui,
        camera_enabled=not args.no_camera, **_scene_overrides(args),
    )
    started = time.monotonic()
    stack.start()
    if args.console:
        from teachbot.nodes.interaction_manager_node import InteractionManagerNode

        stack.add_node(InteractionManagerNode(llm_config=args.llm_config) if args.llm_config else InteractionManagerNode())
    print(
        f"teachbot sim ready in {time.monotonic() - started:.1f} s on ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']} "
        f"(loopback only). Actions: /skills/<pick|place|put_first_on_second|handover|move_to|gripper|go_home|wait>; "
        f"{'Talk to it: teachbot chat --domain-id ' + os.environ['ROS_DOMAIN_ID'] + '. ' if args.console else ''}"
        f"Ctrl-C to stop.",
        flush=True,
    )
    stop = threading.Event()
    # rclpy's own SIGTERM handler only shuts rclpy down; a stopped service manager or `timeout`
    # must end this process too
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
        print("stopping", flush=True)
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
