"""``teachbot demo``: the headless demonstration (see teachbot.demo)."""

from __future__ import annotations

import argparse

from teachbot.commands._args import add_scene_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` parser."""
    demo = sub.add_parser("demo", help="headless scripted skill sequence with before/after pictures")
    add_scene_args(demo)
    demo.add_argument("--out", default="out/demo", help="directory for the pictures (default: out/demo)")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo."""
    from teachbot.demo import run_demo

    return run_demo(args)
