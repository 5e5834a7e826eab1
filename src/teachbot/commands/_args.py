"""Arguments shared by several subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_scene_args(parser: argparse.ArgumentParser) -> None:
    """--robot-profile, --seed and --scene: which robot and which tabletop scene."""
    parser.add_argument("--robot-profile", default="panda_sim", help="config/robots/<name>.yaml or a path")
    parser.add_argument("--seed", type=int, default=None, help="random tabletop scene from this seed")
    parser.add_argument("--scene", default="", help="explicit scene YAML (see config/scenes/example.yaml)")


def scene_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The sim node keyword arguments that --seed/--scene ask for."""
    overrides: dict[str, object] = {}
    if getattr(args, "scene", ""):
        overrides["scene_file"] = str(Path(args.scene).resolve())
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = args.seed
    return overrides
