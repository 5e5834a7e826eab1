"""``teachbot web``: the person's web page beside a running robot (``teachbot sim`` or a launch).

Joins the robot's ROS domain (``--domain-id``, printed by teachbot sim) and serves the page on 127.0.0.1 (config/
web.yaml) until Ctrl-C; another address needs a token and ``--tls-cert``/``--tls-key``. ``teachbot sim --web`` and
``web:=true`` with ros2 launch start the same node with the stack.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

from teachbot.commands._args import join_robot_domain


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``web`` parser."""
    web = sub.add_parser("web", help="serve the person's web page for a running robot (talk, camera, console, lessons)",
                         description=__doc__.split("\n\n")[0])
    web.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID the robot runs on (printed by teachbot sim)")
    web.add_argument("--robot", default="panda_sim", help="robot profile (config/robots/<name>.yaml) whose emergency stop the page uses")
    web.add_argument("--config", default="web", metavar="FILE", help="web config (default config/web.yaml)")
    web.add_argument("--host", default="", help="address to serve on (default 127.0.0.1; another needs a token)")
    web.add_argument("--port", type=int, default=None, help="port (default config/web.yaml's 8765; 0: any free port)")
    web.add_argument("--token-file", default="", metavar="FILE",
                     help="file whose first line is the page's token (or set TEACHBOT_WEB_TOKEN); needed off loopback")
    web.add_argument("--tls-cert", default="", metavar="PEM", help="certificate (chain) to serve https; needed off loopback")
    web.add_argument("--tls-key", default="", metavar="PEM", help="the certificate's private key")
    web.add_argument("--no-confirm", action="store_true",
                     help="do not switch the robot to confirm-before-store (config/web.yaml confirm_lessons)")
    web.set_defaults(func=run, own_env=True)


def run(args: argparse.Namespace) -> int:
    """Join the robot's domain and serve the page until Ctrl-C or SIGTERM."""
    if not join_robot_domain(args):
        return 2
    import rclpy  # deferred: rclpy, loaded when the command runs
    from rclpy.executors import MultiThreadedExecutor  # deferred: rclpy, loaded when the command runs
    from rclpy.signals import SignalHandlerOptions  # deferred: rclpy, loaded when the command runs

    from teachbot.nodes.web_node import WebNode  # deferred: rclpy, uvicorn, loaded when the command runs
    from teachbot.ros_env import configure_loopback  # deferred: loaded when the command runs

    configure_loopback()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = None
    try:
        node = WebNode(config=args.config, robot_profile=args.robot, host=args.host,
                       port=-1 if args.port is None else args.port, confirm_lessons="false" if args.no_confirm else "",
                       token_file=args.token_file, tls_cert=args.tls_cert, tls_key=args.tls_key)
        executor = MultiThreadedExecutor(num_threads=2)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True, name="web-spin")
        spinner.start()
        shown = node.url + ("?token=<the token>" if node.settings.token else "")
        print(f"teachbot web: {shown} for the robot on ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']}; Ctrl-C to stop",
              flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        executor.shutdown(timeout_sec=2.0)
        spinner.join(timeout=5.0)
    finally:
        if node is not None:
            node.close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    print("stopped", flush=True)
    return 0
