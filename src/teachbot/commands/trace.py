"""``teachbot trace list|show [EPISODE]``: the episode traces (teachbot.tracing) in the terminal."""

from __future__ import annotations

import argparse
import json
import time


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``trace`` parser."""
    trace = sub.add_parser("trace", help="episode traces: list them, or show one as a tree with timings")
    verbs = trace.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the episodes in the trace files, oldest first")
    show = verbs.add_parser("show", help="one episode's trace as an indented tree (default: the newest episode)")
    show.add_argument("episode", nargs="?", default="", help="an episode id (a prefix is enough) or a trace id")
    show.add_argument("--json", action="store_true", help="print the episode's spans as JSON Lines instead of a tree")
    for parser in (listing, show):
        parser.add_argument("--dir", default="", help="the traces folder (default: tracing.directory of config/tracing.yaml, "
                                                      "TEACHBOT_TRACE_DIR, or the run directory's traces/)")
    trace.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the episodes, or one episode's trace."""
    from pathlib import Path  # deferred: loaded when the command runs

    from teachbot.tracing.jsonl import read_spans  # deferred: opentelemetry, loaded when the command runs
    from teachbot.tracing.setup import TracingConfig  # deferred: opentelemetry, loaded when the command runs
    from teachbot.tracing.tree import episode_trace, episodes, render  # deferred: loaded when the command runs

    directory = Path(args.dir) if args.dir else TracingConfig.load().trace_dir()
    spans = read_spans(directory)
    if args.verb == "list":
        found = episodes(spans)
        if not found:
            print(f"no episode traces in {directory}")
        for episode in found:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(episode.start_ns / 1e9))
            print(f"{episode.episode_id:14} {started}  {episode.seconds:8.1f} s  {episode.spans:4d} spans  trace {episode.trace_id}")
        return 0
    trace = episode_trace(spans, args.episode)
    if args.json:
        for record in trace:
            print(json.dumps(record.__dict__, default=list, ensure_ascii=False))
    else:
        print(render(trace))
    return 0
