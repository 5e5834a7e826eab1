"""Arguments and output shared by several subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from teachbot.errors import ConfigError


def comma_names(text: str) -> tuple[str, ...]:
    """The names of a comma-separated option ('a, b' -> ('a', 'b')); a name given twice is a ConfigError."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if len(set(names)) != len(names):
        raise ConfigError(f"a name is given twice in {text!r}")
    return names


def add_scene_args(parser: argparse.ArgumentParser) -> None:
    """--world, --robot-profile, --seed and --scene: which world, which robot and which scene."""
    parser.add_argument("--world", default="tabletop", choices=("tabletop", "household"),
                        help="tabletop (blocks and bowls) or household (a kitchen, the arm on a mobile base)")
    parser.add_argument("--robot-profile", default="panda_sim", help="config/robots/<name>.yaml or a path "
                        "(default panda_sim; household_sim with --world household)")
    parser.add_argument("--seed", type=int, default=None, help="random scene from this seed")
    parser.add_argument("--scene", default="", help="explicit scene YAML (see config/scenes/example.yaml, "
                        "config/household/scenes/kitchen.yaml)")


def add_model_args(parser: argparse.ArgumentParser, doubles: str, roles: str) -> None:
    """--models doubles|config, the endpoint's --llm-base-url/--llm-model/--llm-config, and --allow-paid, as the
    benchmarks take them; ``doubles`` says what the offline stand-ins are, ``roles`` which LLM roles config gives."""
    parser.add_argument("--models", default="doubles", choices=("doubles", "config"),
                        help=f"doubles: {doubles} that prove the mechanics, not a model (default); config: the {roles} "
                             "of config/llm.yaml")
    parser.add_argument("--llm-base-url", default="", metavar="URL", help="OpenAI-compatible endpoint (--models config)")
    parser.add_argument("--llm-model", default="", metavar="NAME", help="model name the endpoint serves (--models config)")
    parser.add_argument("--llm-config", default="", metavar="FILE", help="LLM config file (default config/llm.yaml)")
    parser.add_argument("--allow-paid", action="store_true",
                        help="allow an endpoint that is not on this machine or network (a hosted API bills every call)")


def scene_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The sim node keyword arguments that --seed/--scene ask for."""
    overrides: dict[str, object] = {}
    if getattr(args, "scene", ""):
        overrides["scene_file"] = str(Path(args.scene).resolve())
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = args.seed
    return overrides


def add_stack_args(parser: argparse.ArgumentParser) -> None:
    """The node-set arguments (teachbot.nodes.nodeset.ARGUMENTS) every mode shares: LLM, memory, perception, recording."""
    llm = parser.add_argument_group("LLM (any of these also starts the interaction manager and improvement nodes)")
    llm.add_argument("--console", action="store_true",
                     help="run the LLM console (interaction manager) with config/llm.yaml's LLM")
    llm.add_argument("--llm-backend", default="", choices=("", "openai", "transformers", "scripted"), metavar="NAME",
                     help="openai | transformers | scripted, for every LLM role (default: config/llm.yaml)")
    llm.add_argument("--llm-model", default="", metavar="NAME",
                     help="served model name (openai), model folder (transformers), replay file (scripted)")
    llm.add_argument("--llm-base-url", default="", metavar="URL",
                     help="OpenAI-compatible endpoint: vLLM http://127.0.0.1:8000/v1, Ollama http://127.0.0.1:11434/v1")
    llm.add_argument("--llm-config", default="", metavar="FILE", help="LLM config file (default config/llm.yaml)")
    parser.add_argument("--memory", default="", metavar="DIR",
                        help="directory of learned examples (default: memory_store/learned, see config/memory.yaml)")
    parser.add_argument("--perception-backend", default="", metavar="NAME",
                        help="sim_ground_truth | yolo_world | owlv2 (default: config/perception.yaml)")
    parser.add_argument("--record", default="", metavar="DIR", help="record the session into DIR")
    parser.add_argument("--web", action="store_true",
                        help="also serve the person's web page (config/web.yaml; see teachbot web)")
    parser.add_argument("--dry-run", action="store_true", help="print the nodes and their parameters, start nothing")


def node_set_values(args: argparse.Namespace, mode: str) -> dict[str, object]:
    """The teachbot.nodes.nodeset argument values the parsed command line asks for (unset ones stay out)."""
    values: dict[str, object] = {
        "robot_profile": args.robot_profile,
        "console": args.console,
        "llm_backend": args.llm_backend,
        "llm_model": args.llm_model,
        "llm_base_url": args.llm_base_url,
        "llm_config": str(Path(args.llm_config).resolve()) if args.llm_config else "",
        "memory": str(Path(args.memory).expanduser().resolve()) if args.memory else "",
        "perception_backend": args.perception_backend,
        "record": str(Path(args.record).resolve()) if args.record else "",
        "web": True if getattr(args, "web", False) else None,
    }
    if mode in ("sim", "replay"):
        values["world"] = getattr(args, "world", "tabletop")
        values.update(gui=args.gui, real_time_factor=args.real_time_factor,
                      camera=False if args.no_camera else None, **{
                          "seed": args.seed, "scene_file": str(Path(args.scene).resolve()) if args.scene else ""})
    return {k: v for k, v in values.items() if v is not None and v != ""}


def join_robot_domain(args: argparse.Namespace) -> bool:
    """Take ``--domain-id`` (or the environment's ROS_DOMAIN_ID) as this process's domain: the robot's, as
    ``teachbot sim`` printed it. False, with the error said, when neither names one."""

    if args.domain_id is not None:
        os.environ["ROS_DOMAIN_ID"] = str(args.domain_id)
    if not os.environ.get("ROS_DOMAIN_ID"):
        print("error: set --domain-id (or ROS_DOMAIN_ID) to the id `teachbot sim` printed", file=sys.stderr)
        return False
    return True


def aligned(header: tuple[str, ...], rows: list[tuple[str, ...]], width: int | None, empty: str) -> str:
    """Columns padded to their widest cell; the last one takes the rest of a ``width`` line, cut with '...'
    (at least 20 characters; no cut without a width). ``empty`` when there are no rows."""
    if not rows:
        return empty
    fixed = len(header) - 1
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(fixed)]
    room = max(20, width - sum(widths) - 2 * len(widths)) if width else sys.maxsize

    def line(cells: tuple[str, ...]) -> str:
        text = cells[fixed] if len(cells[fixed]) <= room else cells[fixed][: room - 3] + "..."
        return "  ".join(c.ljust(w) for c, w in zip(cells[:fixed], widths)) + "  " + text

    return "\n".join([line(header), *(line(r) for r in rows)])
