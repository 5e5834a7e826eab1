"""``teachbot chat``: talk to a running robot from this terminal."""

from __future__ import annotations

import argparse

from teachbot.commands._args import join_robot_domain


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``chat`` parser."""
    chat = sub.add_parser("chat", help="talk to the robot from this terminal (needs a running interaction manager)")
    chat.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID the robot runs on (printed by teachbot sim)")
    chat.add_argument("--quiet", action="store_true", help="do not print the console transcript, only the dialog")
    chat.add_argument("--robot", default="panda_sim",
                      help="robot profile (config/robots/<name>.yaml) whose emergency stop topic /stop and /resume use")
    chat.set_defaults(func=run, own_env=True)


def run(args: argparse.Namespace) -> int:
    """Join the robot's domain and chat until the session ends."""
    if not join_robot_domain(args):
        return 2
    from teachbot.nodes.chat_client import run_chat  # deferred: pybullet, rclpy, loaded when the command runs
    from teachbot.ros_env import configure_loopback  # deferred: loaded when the command runs

    configure_loopback()

    return run_chat(args)
