"""``teachbot replay BAG [--check]``: replay a recorded session in simulation (see teachbot.nodes.replay_check)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``replay`` parser."""
    replay = sub.add_parser("replay", help="replay a recorded session bag in simulation; --check compares it with the recording")
    replay.add_argument("bags", nargs="+", metavar="BAG", help="bag directories written by `teachbot record`")
    replay.add_argument("--check", action="store_true",
                        help="compare transcript, dialog, LLM calls and final world state; exit 1 on any divergence")
    replay.add_argument("--times", type=int, default=1, help="replay each bag this often (determinism check)")
    replay.add_argument("--out", default="", help="also keep the replay's own recording in this directory (one bag per run)")
    replay.add_argument("--quiet", action="store_true", help="do not print the console transcript")
    replay.add_argument("--timeout", type=float, default=300.0, help="seconds a replayed conversation may take")
    replay.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay every bag ``--times`` times; the exit status is 1 when any replay diverged or differs (with --check)."""
    from pathlib import Path  # deferred: loaded when the command runs

    from teachbot.nodes.replay_check import replay  # deferred: pybullet, rclpy, loaded when the command runs

    failed = 0
    transcripts: dict[str, set[tuple[str, ...]]] = {}
    for bag in args.bags:
        for attempt in range(max(1, args.times)):
            out = Path(args.out) / f"{Path(bag).name}_{attempt + 1}" if args.out else None
            print(f"replaying {bag}" + (f" ({attempt + 1}/{args.times})" if args.times > 1 else ""), flush=True)
            report = replay(bag, check=args.check, out=out, timeout=args.timeout,
                            on_line=None if args.quiet else (lambda line: print(f"  {line}", flush=True)))
            print(report.render(), flush=True)
            if report.replayed is not None:
                transcripts.setdefault(bag, set()).add(tuple(report.replayed.transcript))
            failed += not report.ok if args.check else report.divergence is not None
    for bag, seen in transcripts.items():
        if args.times > 1:
            print(f"{bag}: {len(seen)} distinct transcript(s) in {args.times} replays", flush=True)
            failed += args.check and len(seen) > 1
    if failed:
        print(f"{failed} replay(s) diverged", file=sys.stderr)
    return 1 if failed else 0
