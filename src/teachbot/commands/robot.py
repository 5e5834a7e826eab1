"""``teachbot robot``: a physical arm. The node set's robot mode (skills, perception, memory; LLM nodes
on request) in one process, until Ctrl-C; the arm's and camera's drivers run beside it and provide the
topics the robot profile names."""

from __future__ import annotations

import argparse

from teachbot.commands._args import add_stack_args
from teachbot.commands.sim import serve


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``robot`` parser."""
    robot = sub.add_parser(
        "robot", help="run the stack for a physical arm (no simulator) until Ctrl-C",
        description="The stack for a physical arm in one process: the same nodes as "
                    "`ros2 launch teachbot robot.launch.py`. Start the arm's drivers (e.g. ros2_control) and the "
                    "camera driver beside it; the robot profile names their topics.",
    )
    robot.add_argument("--robot-profile", default="panda_real", metavar="NAME",
                       help="config/robots/<name>.yaml or a path (default: panda_real)")
    add_stack_args(robot)
    robot.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the real-arm stack until Ctrl-C or SIGTERM."""
    from teachbot.robot_profile import RobotProfile  # deferred: loaded when the command runs

    profile = RobotProfile.load(args.robot_profile)  # a bad profile fails here, before any node starts
    if not args.dry_run:
        topics = profile.topics
        print(f"robot profile {profile.name}: trajectories to {topics['joint_trajectory']}, gripper to "
              f"{topics['gripper_command']}, joint states from {topics['joint_states']}, objects from {topics['objects']}, "
              f"e-stop on {topics['emergency_stop']}", flush=True)
    return serve("robot", args)
