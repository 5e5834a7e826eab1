#!/usr/bin/env python3
"""Two-process rclpy talker/listener under teachbot's loopback DDS environment.

Used by tools/prove_loopback.sh to generate real DDS traffic (discovery and data) while tcpdump and
strace watch where it goes. ``run`` applies :func:`teachbot.ros_env.configure_loopback` (holding
the reserved ROS_DOMAIN_ID for its lifetime), starts a listener and a talker as separate processes
and exits 0 only if the listener received messages.

    .venv/bin/python tools/dds_pingpong.py run [--count 20] [--timeout 30]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rclpy is importable only once the venv's ROS environment is set up
    from rclpy.node import Node

TOPIC = "teachbot_loopback_probe"
ROOT = Path(__file__).resolve().parents[1]


def _node(name: str) -> Node:
    """Initialise rclpy and return a node called ``name``."""
    import rclpy

    rclpy.init()
    return rclpy.create_node(name)


def talk(count: int, timeout: float) -> int:
    """Publish ``count`` strings (plus a grace period for discovery) and return 0."""
    import rclpy
    from std_msgs.msg import String

    node = _node("loopback_talker")
    pub = node.create_publisher(String, TOPIC, 10)
    deadline = time.monotonic() + timeout
    sent = 0
    # Publish while a listener is matched; stop once it has gone (it got its messages) or on timeout.
    while time.monotonic() < deadline and sent < count * 5:
        if pub.get_subscription_count() > 0:
            pub.publish(String(data=f"ping {sent}"))
            sent += 1
        elif sent:
            break
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()
    print(f"talker: sent {sent}", flush=True)
    return 0


def listen(count: int, timeout: float) -> int:
    """Receive ``count`` messages; return 0 if they all came before ``timeout`` seconds."""
    import rclpy
    from std_msgs.msg import String

    node = _node("loopback_listener")
    received: list[str] = []
    node.create_subscription(String, TOPIC, lambda msg: received.append(msg.data), 10)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(received) < count:
        rclpy.spin_once(node, timeout_sec=0.1)
    node.destroy_node()
    rclpy.shutdown()
    print(f"listener: received {len(received)}", flush=True)
    return 0 if len(received) >= count else 1


def run(count: int, timeout: float) -> int:
    """Configure the loopback environment, run listener and talker processes, report the result."""
    sys.path.insert(0, str(ROOT / "src"))  # works without the editable install too
    from teachbot.ros_env import configure_loopback

    env = configure_loopback(dict(os.environ))
    for key in ("RMW_IMPLEMENTATION", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID",
                "FASTDDS_DEFAULT_PROFILES_FILE"):
        print(f"{key}={env[key]}", flush=True)
    # configure_loopback reserved the domain in *this* process: children inherit it via env while
    # this process (and so the lock) stays alive.
    args = ["--count", str(count), "--timeout", str(timeout)]
    listener = subprocess.Popen([sys.executable, __file__, "listen", *args], env=env)
    talker = subprocess.Popen([sys.executable, __file__, "talk", *args], env=env)
    listener_rc = listener.wait(timeout=timeout + 30)
    talker.wait(timeout=timeout + 30)
    return listener_rc


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("run", "talk", "listen"))
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    return {"run": run, "talk": talk, "listen": listen}[args.mode](args.count, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
