"""``teachbot demo``: the headless demonstration of learning from a correction (see teachbot.nodes.demo_session)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` parser."""
    demo = sub.add_parser("demo", help="replay the shipped learning session (or a live one with an LLM endpoint), "
                                       "with before/after pictures and a GIF")
    demo.add_argument("--out", default="out/demo", help="directory for the pictures (default: out/demo)")
    demo.add_argument("--replay", default="", metavar="BAG",
                      help="replay this session bag even when an LLM is configured (default: test/bags/learning_episode)")
    demo.add_argument("--llm-base-url", default="", help="OpenAI-compatible endpoint for a live session (or $OPENAI_BASE_URL)")
    demo.add_argument("--llm-model", default="", help="model the endpoint serves, for a live session")
    demo.add_argument("--scene", default="", help="scene YAML of a live session (default config/scenes/example.yaml)")
    demo.add_argument("--record", default="", metavar="DIR", help="record a live session into this bag directory")
    demo.add_argument("--timeout", type=float, default=300.0, help="seconds the replayed conversation may take")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo."""
    from teachbot.nodes.demo_session import run_demo  # deferred: rclpy, loaded when the command runs

    return run_demo(args)
