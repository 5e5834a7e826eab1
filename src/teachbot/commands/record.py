"""``teachbot record``: the simulated robot with the LLM console, recorded into a rosbag2 until Ctrl-C.

Talk to it from another terminal with ``teachbot chat --domain-id N``; replay the bag with
``teachbot replay BAG --check``.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

from teachbot.commands._args import add_scene_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``record`` parser."""
    record = sub.add_parser("record", help="run sim + console (LLM from config/llm.yaml) and record the session into a bag")
    add_scene_args(record)
    record.add_argument("--out", default="", help="bag directory to create (default recordings/session_<time>)")
    record.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="rosbag2 storage (default mcap)")
    record.add_argument("--camera", action="store_true", help="also record the colour camera images (large)")
    record.add_argument("--real-time-factor", type=float, default=1.0, help="simulated seconds per wall second")
    record.add_argument("--llm-config", default="", help="LLM config file (default config/llm.yaml)")
    record.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run and record until Ctrl-C or SIGTERM; print the bag's path."""
    from teachbot.llm.factory import load_llm_config, model_from_config  # deferred: loaded when the command runs
    from teachbot.nodes.console_stack import ConsoleStack  # deferred: pybullet, rclpy, loaded when the command runs
    from teachbot.paths import config_path  # deferred: loaded when the command runs
    from teachbot.recording.bag import SessionSpec  # deferred: loaded when the command runs

    # deferred: loaded when the command runs
    from teachbot.world.scene import TabletopConfig, generate_scene, load_scene_file

    table = TabletopConfig.load()
    if args.scene:
        scene = load_scene_file(args.scene, table)
    else:
        scene = generate_scene(args.seed if args.seed is not None else 0, table) if args.seed is not None else \
            load_scene_file(config_path("scenes", "example.yaml"), table)
    raw = load_llm_config(args.llm_config or None)
    spec = SessionSpec(robot_profile=args.robot_profile, scene_yaml=scene.to_yaml(), seed=scene.seed,
                       real_time_factor=args.real_time_factor, title="recorded with teachbot record")
    console = ConsoleStack(spec, interaction_model=model_from_config(raw, "interaction"),
                           function_model=model_from_config(raw, "function_generation"),
                           improvement_model=model_from_config(raw, "improvement"), camera=args.camera)
    out = args.out or time.strftime("recordings/session_%Y%m%d_%H%M%S")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        console.start()
        recording = console.record(out, storage=args.storage, camera=args.camera)
        console.start_console()
        domain = os.environ.get("ROS_DOMAIN_ID", "0")
        print(f"recording into {recording.path}; talk to the robot: teachbot chat --domain-id {domain}; Ctrl-C to stop",
              flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        console.stop()
    print(f"bag: {out}  (replay: teachbot replay {out} --check)", flush=True)
    return 0
