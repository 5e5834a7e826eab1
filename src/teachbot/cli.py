"""The ``teachbot`` command: run the stack where ``ros2 launch`` is not installed, talk to it, demo it.

    teachbot sim [--gui] [--seed N | --scene FILE] [--real-time-factor X] [--robot-profile NAME] [--console]
    teachbot chat --domain-id N
    teachbot web --domain-id N [--port P] [--host H --token-file FILE]
    teachbot demo [--out DIR] [--scene FILE | --seed N]

Each subcommand lives in its own module of teachbot.commands (``register`` + ``run``). Commands that
start nodes run them in one process on a loopback-only DDS domain of their own.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from teachbot.errors import TeachbotError

# modules of teachbot.commands, in the order `teachbot --help` lists them
COMMANDS = ("sim", "robot", "chat", "web", "memory", "demo", "record", "replay", "trace", "eval")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="teachbot", description="LLM-orchestrated robot that learns from corrections")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"teachbot.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``teachbot``; returns the exit status."""
    args = build_parser().parse_args(argv)
    from teachbot.ros_env import configure_loopback  # deferred: loaded when the command runs

    try:
        # commands that join an existing robot's domain (chat) set up DDS themselves
        if not getattr(args, "own_env", False):
            configure_loopback()
        return int(args.func(args))
    except TeachbotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `teachbot memory list | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
