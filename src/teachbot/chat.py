"""``teachbot chat``: a person's terminal. Lines typed go to dialog/user; the robot's words and,
unless --quiet, the console transcript are printed as they arrive."""

from __future__ import annotations

import argparse
import sys
import threading

import rclpy
from rclpy.executors import SingleThreadedExecutor
from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate

from teachbot.nodes.common import COMMAND_QOS
from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS

DIM, BOLD, RESET = "\033[2m", "\033[1m", "\033[0m"


def run_chat(args: argparse.Namespace) -> int:
    rclpy.init()
    node = rclpy.create_node("chat")
    color = sys.stdout.isatty()
    lock = threading.Lock()

    def show(text: str, style: str) -> None:
        with lock:
            print(f"{style}{text}{RESET}" if color else text, flush=True)

    node.create_subscription(DialogTurn, "dialog/robot", lambda m: show(f"robot: {m.text}", BOLD), COMMAND_QOS)
    if not args.quiet:
        node.create_subscription(TranscriptUpdate, "interaction/transcript",
                                 lambda m: show("\n".join(m.lines), DIM), TRANSCRIPT_QOS)
    say = node.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    show("type to the robot; Ctrl-D to leave", "")
    try:
        for line in sys.stdin:
            if line.strip():
                say.publish(DialogTurn(speaker="user", type="dialog", text=line.strip()))
    except KeyboardInterrupt:
        pass
    finally:
        executor.shutdown(timeout_sec=1.0)
        spinner.join(timeout=2.0)
        node.destroy_node()
        rclpy.shutdown()
    return 0
