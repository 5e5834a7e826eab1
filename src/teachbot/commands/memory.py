"""``teachbot memory``: look after the episodic memory store (seed and learned examples).

    teachbot memory list [--profile P] [--source seed|learned]
    teachbot memory show ID
    teachbot memory remove [--any-robot] ID [ID ...]
    teachbot memory export FILE [--profile P] [--source seed|learned|all]
    teachbot memory import FILE
    teachbot memory migrate --to postgres|files [--dsn DSN] [--memory DIR] [--knowledge DIR] [--tasks DIR] [--batch N]
                            [--no-embeddings]
    teachbot memory knowledge list [--kind K] [--object TEXT] [--task TEXT]
    teachbot memory knowledge show ID
    teachbot memory knowledge remove ID [ID ...]
    teachbot memory knowledge export FILE [--kind K] [--object TEXT] [--task TEXT]
    teachbot memory knowledge import FILE
    teachbot memory tasks list | show TASK   (teachbot.commands.memory_tasks)
    teachbot memory add-robot NAME | promote ID   (the operator's: teachbot.commands.memory_fleet)

Works on the store of config/memory.yaml's ``memory.store.backend``: the files directly (teachbot.memory.MemoryStore,
teachbot.knowledge.KnowledgeStore: atomic writes under a lock file), or the fleet's PostgreSQL database
(``postgres``, or ``--dsn``; teachbot.memory.pg_store, one transaction per change); ``--memory DIR`` always means a
file store. Either is safe while memory nodes run; they pick the changes up before their next retrieval (on
the database at once, through NOTIFY). ``knowledge`` is the distilled knowledge base (short facts learned from
corrections), in ``memory.store.knowledge_dir`` of config/memory.yaml or in the database. ``migrate`` copies the
learned examples, the knowledge and the task logs between the files and the database (teachbot.stores.migrate).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from teachbot.commands._args import aligned
from teachbot.knowledge import KINDS, KnowledgeEntry, KnowledgeError, KnowledgeStore
from teachbot.memory import LEARNED, SEED, InteractionExample, MemoryConfig, MemoryStore, MemoryStoreError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``memory`` parser and its subcommands."""
    memory = sub.add_parser("memory", help="list, show, remove, export and import remembered interactions",
                            description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default="", metavar="FILE", help="memory config (default config/memory.yaml)")
    common.add_argument("--memory", default="", metavar="DIR",
                        help="a file store: directory of learned examples (default: store.learned_dir of the config)")
    common.add_argument("--dsn", default="", help="the fleet's PostgreSQL database (default: store.dsn of the config "
                        "when its backend is postgres), e.g. 'host=db.local dbname=teachbot user=robot'")
    actions = memory.add_subparsers(dest="action", required=True,
                                    metavar="{list,show,remove,export,import,migrate,knowledge,tasks,add-robot,promote}")

    listing = actions.add_parser("list", parents=[common], help="a table of the stored examples")
    listing.add_argument("--profile", default="", help="only this robot API profile (tabletop, household)")
    listing.add_argument("--source", default="", choices=("", SEED, LEARNED), help="only seed or only learned examples")
    listing.set_defaults(func=run_list)

    show = actions.add_parser("show", parents=[common], help="one example: provenance and transcript")
    show.add_argument("id")
    show.set_defaults(func=run_show)

    remove = actions.add_parser("remove", parents=[common], help="delete this robot's learned examples (seeds are files to edit)")
    remove.add_argument("ids", nargs="+", metavar="ID")
    remove.add_argument("--any-robot", action="store_true", help="the fleet database: remove another robot's lesson too "
                        "(the operator's login; a robot's role is refused)")
    remove.set_defaults(func=run_remove)

    export = actions.add_parser("export", parents=[common], help="write examples to a JSON Lines file")
    export.add_argument("file", type=Path)
    export.add_argument("--profile", default="", help="only this robot API profile")
    export.add_argument("--source", default=LEARNED, choices=(SEED, LEARNED, "all"), help="which examples (default: learned)")
    export.set_defaults(func=run_export)

    imp = actions.add_parser("import", parents=[common], help="add the learned examples of a JSON Lines export")
    imp.add_argument("file", type=Path)
    imp.set_defaults(func=run_import)

    migrate = actions.add_parser("migrate", parents=[common], help="copy learned examples, knowledge and task logs from "
                                 "the files into the fleet's database, or back (idempotent, resumable, verified)")
    migrate.add_argument("--to", required=True, choices=("postgres", "files"), help="where the examples go")
    migrate.add_argument("--batch", type=int, default=500, help="examples per transaction into the database (default 500)")
    migrate.add_argument("--no-embeddings", action="store_true",
                         help="do not embed the keys (the robots embed them on first use)")
    migrate.add_argument("--knowledge", default="", metavar="DIR", help="the file knowledge base (default: store.knowledge_dir)")
    migrate.add_argument("--tasks", default="", metavar="DIR", help="the task logs' directory (default: store.tasks_dir)")
    migrate.set_defaults(func=run_migrate)
    register_knowledge(actions)
    from teachbot.commands import memory_fleet, memory_tasks  # deferred: loaded when the command runs

    memory_tasks.register(actions)
    memory_fleet.register(actions)
    # the store is files: no ROS domain needed
    memory.set_defaults(own_env=True)


def register_knowledge(actions: argparse._SubParsersAction) -> None:
    """Add ``memory knowledge`` and its subcommands (the distilled knowledge base)."""
    knowledge = actions.add_parser("knowledge", help="list, show, remove, export and import distilled knowledge",
                                   description="The knowledge base: short reusable facts distilled from corrections.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default="", metavar="FILE", help="memory config (default config/memory.yaml)")
    common.add_argument("--knowledge", default="", metavar="DIR",
                        help="a file knowledge base: its directory (default: store.knowledge_dir of the config)")
    common.add_argument("--dsn", default="", help="the fleet's PostgreSQL database (default: store.dsn of the config "
                        "when its backend is postgres)")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--kind", default="", choices=KINDS, help="only entries of this kind")
    filters.add_argument("--object", default="", help="only entries whose object contains this text")
    filters.add_argument("--task", default="", help="only entries whose task contains this text")
    kactions = knowledge.add_subparsers(dest="knowledge_action", required=True, metavar="{list,show,remove,export,import}")

    kactions.add_parser("list", parents=[common, filters], help="a table of the stored entries").set_defaults(func=run_knowledge_list)
    show = kactions.add_parser("show", parents=[common], help="one entry: its fields and provenance")
    show.add_argument("id")
    show.set_defaults(func=run_knowledge_show)
    remove = kactions.add_parser("remove", parents=[common], help="delete entries")
    remove.add_argument("ids", nargs="+", metavar="ID")
    remove.set_defaults(func=run_knowledge_remove)
    export = kactions.add_parser("export", parents=[common, filters], help="write entries to a JSON Lines file")
    export.add_argument("file", type=Path)
    export.set_defaults(func=run_knowledge_export)
    imp = kactions.add_parser("import", parents=[common], help="add the entries of a JSON Lines export (known ids skipped)")
    imp.add_argument("file", type=Path)
    imp.set_defaults(func=run_knowledge_import)


def open_store(args: argparse.Namespace) -> Any:
    """The store the config (and --memory, --dsn) name: a MemoryStore, or a PgMemoryStore without a listener."""
    config = MemoryConfig.load(args.config or None)
    if args.memory or (config.backend != "postgres" and not args.dsn):
        return MemoryStore(Path(args.memory).expanduser().resolve() if args.memory else config.learned_dir, config.seeds_dir)
    from teachbot.stores.backend import open_database  # deferred: loaded when the command runs

    return open_database(config, args.dsn, listen=False)


def where(store: Any) -> str:
    """Where a store keeps its learned examples, for messages."""
    database = getattr(store, "where", None)
    return f"the database at {database}" if database else str(store.learned_dir)


def run_list(args: argparse.Namespace) -> int:
    """Print a table: id, source, profile, created, first instruction."""
    store = open_store(args)
    examples = store.list(profile=args.profile, source=args.source)
    # on a terminal the last column is cut to the window; piped, nothing is cut (grep, less -S)
    print(format_table(examples, shutil.get_terminal_size().columns if sys.stdout.isatty() else None))
    learned = sum(e.source == LEARNED for e in examples)
    print(f"\n{len(examples)} example{'s' * (len(examples) != 1)} ({len(examples) - learned} seed, {learned} learned); "
          f"learned examples in {where(store)}")
    return 0


def format_table(examples: list[InteractionExample], width: int | None = 120) -> str:
    """Aligned columns; the instruction column takes the rest of the line and is cut with '...'."""
    rows = [(e.id, e.source, e.profile, e.created[:19].replace("T", " "), e.keys[0] if e.keys else "") for e in examples]
    return aligned(("ID", "SOURCE", "PROFILE", "CREATED", "FIRST INSTRUCTION"), rows, width, "no examples stored")


def run_show(args: argparse.Namespace) -> int:
    """Print one example's fields, then its transcript."""
    example = open_store(args).get(args.id)
    fields = ("id", "source", "profile", "created", "episode_id", "author_model", "embedding_model", "problem",
              "improvement", "scope")
    for name in fields:
        value = getattr(example, name)
        if value:
            print(f"{name + ':':<17}{value}")
    print(f"{'instructions:':<17}{' | '.join(example.keys)}")
    print()
    print(example.transcript.rstrip("\n"))
    return 0


def run_remove(args: argparse.Namespace) -> int:
    """Remove each id; every failure is reported and makes the exit status 1."""
    store = open_store(args)
    failed = 0
    if args.any_robot and not hasattr(store, "remove_any_robot"):
        print("error: --any-robot: a file store holds this robot's lessons only", file=sys.stderr)
        return 1
    for example_id in args.ids:
        try:
            store.remove_any_robot(example_id) if args.any_robot else store.remove(example_id)
        except MemoryStoreError as exc:  # an unknown id, another robot's, a seed, an I/O error: say it, go on
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
        else:
            print(f"removed {example_id}")
    return 1 if failed else 0


def run_export(args: argparse.Namespace) -> int:
    """Write the chosen examples as JSON Lines."""
    store = open_store(args)
    count = store.export_jsonl(args.file, profile=args.profile, source="" if args.source == "all" else args.source)
    print(f"exported {count} example{'s' * (count != 1)} to {args.file}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    """Add the learned examples of an export; ids already stored (and seed records) are skipped."""
    store = open_store(args)
    report = store.import_jsonl(args.file)
    print(f"imported {len(report.added)} example{'s' * (len(report.added) != 1)} into {where(store)}"
          + (f"; skipped {len(report.skipped)} already stored or seed: {', '.join(report.skipped)}" if report.skipped else ""))
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    """Copy the learned examples, the knowledge entries and the task logs between the files and the database;
    exit status 1 unless everything is verified."""
    import tempfile  # deferred: loaded when the command runs

    # deferred: loaded when the command runs
    from teachbot.stores.backend import config_embedder, open_database, open_knowledge

    # deferred: psycopg, loaded when the command runs
    from teachbot.stores.migrate import database_to_files, files_to_database, knowledge_to_database, knowledge_to_files, task_logs

    config = MemoryConfig.load(args.config or None)
    learned = Path(args.memory).expanduser().resolve() if args.memory else config.learned_dir
    knowledge_dir = Path(args.knowledge).expanduser().resolve() if args.knowledge else config.knowledge_path
    tasks_dir = Path(args.tasks).expanduser().resolve() if args.tasks else config.tasks_path
    files = MemoryStore(learned, config.seeds_dir)
    embedder = None if args.no_embeddings or args.to == "files" else config_embedder(config)
    database = open_database(config, args.dsn, listen=False, embedder=embedder)
    knowledge = open_knowledge(config, dsn=args.dsn or config.dsn, offline_ok=False)

    def progress(done: int, total: int) -> None:
        print(f"  {done} of {total}", file=sys.stderr, flush=True)

    try:
        if args.to == "postgres":
            reports = [files_to_database(files, database, lambda: open_database(config, args.dsn, listen=False), args.batch, progress),
                       knowledge_to_database(KnowledgeStore(knowledge_dir), knowledge,
                                             lambda: open_knowledge(config, dsn=args.dsn or config.dsn, offline_ok=False),
                                             args.batch, progress)]
        else:
            reports = [database_to_files(database, files, lambda: MemoryStore(learned, config.seeds_dir), progress),
                       knowledge_to_files(knowledge, KnowledgeStore(knowledge_dir), lambda: KnowledgeStore(knowledge_dir), progress)]
        with tempfile.TemporaryDirectory(prefix="teachbot-migrate-") as scratch:
            reports.append(task_logs(tasks_dir, args.dsn or config.dsn, config.robot_name, Path(scratch)))
    finally:
        database.close()
        knowledge.close()
    print("\n\n".join(report.summary() for report in reports))
    if not all(report.complete for report in reports):
        print("error: the migration is not complete (see above); the source is unchanged", file=sys.stderr)
        return 1
    backend = "postgres" if args.to == "postgres" else "files"
    print(f"\ndone; the source is unchanged. To use the copy, set memory.store.backend: {backend} in config/memory.yaml")
    return 0


# ------------------------------------------------------------------------------------------ knowledge
def open_knowledge(args: argparse.Namespace) -> Any:
    """The knowledge base the config (and --knowledge, --dsn) name: a KnowledgeStore, or the database's PgKnowledgeStore."""
    if args.knowledge:
        return KnowledgeStore(Path(args.knowledge).expanduser().resolve())
    from teachbot.stores.backend import open_knowledge as open_configured  # deferred: loaded when the command runs

    return open_configured(MemoryConfig.load(args.config or None), dsn=args.dsn, offline_ok=False)


def knowledge_where(store: Any) -> str:
    database = getattr(store, "where", None)
    return f"the database at {database}" if database else str(store.directory)


def format_knowledge_table(entries: list[KnowledgeEntry], width: int | None = 120) -> str:
    """Aligned columns: id, kind, scope, object, created; the sentence takes the rest of the line, cut with '...'."""
    rows = [(e.id, e.kind, e.scope, e.object, e.created[:19].replace("T", " "), e.text) for e in entries]
    return aligned(("ID", "KIND", "SCOPE", "OBJECT", "CREATED", "TEXT"), rows, width, "no knowledge stored")


def run_knowledge_list(args: argparse.Namespace) -> int:
    """Print a table of the entries matching the filters."""
    store = open_knowledge(args)
    entries = store.list(kind=args.kind, object=args.object, task=args.task)
    print(format_knowledge_table(entries, shutil.get_terminal_size().columns if sys.stdout.isatty() else None))
    scopes = ", ".join(f"{sum(e.scope == s for e in entries)} {s}" for s in ("always", "task", "object"))
    print(f"\n{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({scopes}); knowledge in {knowledge_where(store)}")
    return 0


def run_knowledge_show(args: argparse.Namespace) -> int:
    """Print one entry's fields and provenance."""
    entry = open_knowledge(args).get(args.id)
    p = entry.provenance
    rows = [("id", entry.id), ("kind", entry.kind), ("scope", entry.scope), ("text", entry.text), ("task", entry.task),
            ("object", entry.object), ("skill", entry.skill),
            ("parameters", ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v!r}" for k, v in entry.parameters.items())),
            ("created", p.created), ("episode_id", p.episode_id), ("robot_id", p.robot_id), ("model", p.model),
            ("image", f"{len(entry.image_embedding)} values ({entry.image_model})" if entry.image_embedding else ""),
            ("text_embedding", f"{len(entry.text_embedding)} values ({entry.text_model})" if entry.text_embedding else "")]
    for name, value in rows:
        if value:
            print(f"{name + ':':<16}{value}")
    if p.source:
        print("\nlearned from:")
        for line in p.source:
            print(f"  {line}")
    return 0


def run_knowledge_remove(args: argparse.Namespace) -> int:
    """Remove each id; every failure is reported and makes the exit status 1."""
    store = open_knowledge(args)
    failed = 0
    for entry_id in args.ids:
        try:
            store.remove(entry_id)
        except KnowledgeError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
        else:
            print(f"removed {entry_id}")
    return 1 if failed else 0


def run_knowledge_export(args: argparse.Namespace) -> int:
    """Write the matching entries as JSON Lines."""
    store = open_knowledge(args)
    count = store.export_jsonl(args.file, kind=args.kind, object=args.object, task=args.task)
    print(f"exported {count} entr{'y' if count == 1 else 'ies'} to {args.file}")
    return 0


def run_knowledge_import(args: argparse.Namespace) -> int:
    """Add the entries of an export; known ids are skipped; bad lines are reported (exit status 1), the good ones imported."""
    store = open_knowledge(args)
    report = store.import_jsonl(args.file)
    added = len(report.added)
    print(f"imported {added} entr{'y' if added == 1 else 'ies'} into {knowledge_where(store)}"
          + (f"; skipped {len(report.skipped)} already stored: {', '.join(report.skipped)}" if report.skipped else ""))
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if report.errors else 0
