"""``teachbot sim``: the simulated robot (sim + skills nodes, optionally the interaction manager) in
one process, until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

from teachbot.commands._args import add_scene_args, scene_overrides


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sim`` parser."""
    sim = sub.add_parser("sim", help="run the simulated robot: sim + skills nodes, until Ctrl-C")
    add_scene_args(sim)
    sim.add_argument("--gui", action="store_true", help="open the PyBullet window (needs a display)")
    sim.add_argument("--real-time-factor", type=float, default=1.0, help="simulated seconds per wall second; 0 = as fast as possible")
    sim.add_argument("--no-camera", action="store_true", help="do not render or publish camera images")
    sim.add_argument("--console", action="store_true",
                     help="also run the interaction manager (LLM from config/llm.yaml; OPENAI_API_KEY/OPENAI_BASE_URL)")
    sim.add_argument("--llm-config", default="", help="LLM config file (default config/llm.yaml)")
    sim.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the simulated robot until Ctrl-C or SIGTERM."""
    from teachbot.nodes.stack import InProcessStack

    stack = InProcessStack(
        args.robot_profile, real_time_factor=args.real_time_factor, gui=args.gui,
        camera_enabled=not args.no_camera, **scene_overrides(args),
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
