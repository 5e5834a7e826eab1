"""``teachbot chat``: a person's terminal. Lines typed go to dialog/user; the robot's words and,
unless --quiet, the console transcript are printed as they arrive. ``/stop`` engages the emergency stop
(std_msgs/Bool true on the robot profile's ``topics.emergency_stop``), ``/resume`` releases it, ``/end`` ends
the conversation (the robot starts afresh with the next words), ``/help`` lists the commands. With confirm-before-store
on, the robot reads a lesson back and asks: type yes, no, or the lesson in your own words."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Bool
from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate

from teachbot.nodes.common import COMMAND_QOS
from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS
from teachbot.robot_profile import RobotProfile

DIM, BOLD, RESET = "\033[2m", "\033[1m", "\033[0m"
COMMANDS = {  # typed alone on a line; anything else goes to the robot as words
    "/stop": "emergency stop: the robot halts now and refuses to move until /resume",
    "/resume": "release the emergency stop",
    "/end": "end the conversation: the robot starts afresh with what you say next",
    "/help": "list these commands",
}


def handle_line(line: str, speak: Callable[[str], None], stop: Callable[[bool], None], show: Callable[[str], None],
                topic: str = "/emergency_stop", end: Callable[[], None] = lambda: None) -> None:
    """One typed line: a command of COMMANDS, or words for the robot (``speak``); ``stop(True/False)``
    publishes on the emergency stop ``topic``, ``end()`` ends the conversation, ``show`` prints to this terminal."""
    text = line.strip()
    command = text.lower()
    if command == "/stop":
        stop(True)
        show(f"EMERGENCY STOP sent on {topic}: the robot halts and refuses to move; /resume releases it")
    elif command == "/resume":
        stop(False)
        show(f"emergency stop released on {topic}: the robot may move again")
    elif command == "/end":
        end()
        show("conversation ended: the robot starts afresh with what you say next")
    elif command == "/help":
        show("\n".join(f"{name:8} {what}" for name, what in COMMANDS.items()) + "\nanything else is said to the robot; Ctrl-D leaves")
    elif text:
        speak(text)


def line_handler(node: Node, topic: str, show: Callable[[str], None]) -> Callable[[str], None]:
    """Publishers on ``node`` for dialog/user and the emergency stop ``topic``, and :func:`handle_line` over them."""
    words = node.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
    estop = node.create_publisher(Bool, topic, COMMAND_QOS)
    return lambda line: handle_line(line, lambda text: words.publish(DialogTurn(speaker="user", type="dialog", text=text)),
                                    lambda active: estop.publish(Bool(data=active)), show, topic,
                                    lambda: words.publish(DialogTurn(speaker="user", type="end", text="")))


def run_chat(args: argparse.Namespace) -> int:
    """Chat until Ctrl-D: typed lines through :func:`handle_line`, the robot's words printed."""

    topic = RobotProfile.load(getattr(args, "robot", "panda_sim")).topics["emergency_stop"]
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
    handle = line_handler(node, topic, lambda text: show(text, BOLD))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    show("type to the robot; /stop is the emergency stop, /help lists the commands; Ctrl-D to leave", "")
    try:
        for line in sys.stdin:
            handle(line)
    except KeyboardInterrupt:
        pass
    finally:
        executor.shutdown(timeout_sec=1.0)
        spinner.join(timeout=2.0)
        node.destroy_node()
        rclpy.shutdown()
    return 0
