"""Learned and seed examples read from files, and a learned example made ready for a store.

Both backends of the example memory (teachbot.memory.store, teachbot.memory.pg_store) read the seeds
(``<seeds_dir>/<profile>/*.txt``, one hand-written console transcript each) and the JSON Lines exports of
``teachbot memory export`` through these functions, and prepare what they store with ``prepare_learned``.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from teachbot.language.transcript import Transcript
from teachbot.memory.example import LEARNED, SEED, InteractionExample, MemoryStoreError, utc_now_iso, validate_learned

log = logging.getLogger(__name__)


def prepare_learned(example: InteractionExample) -> InteractionExample:
    """The example as a store holds a learned one: an id (generated when empty), its source and creation time, and
    the instructions derived from its transcript."""
    return example.replace(
        id=example.id or uuid.uuid4().hex,
        source=example.source or LEARNED,
        created=example.created or utc_now_iso(),
    ).with_derived_instructions()


def read_seeds(seeds_dir: Path | None, skip: Path) -> dict[str, InteractionExample]:
    """The seed examples ``<seeds_dir>/<profile>/*.txt`` by id; ``skip`` is a store's own folder (learned
    examples or a spool) that may lie among the profiles' folders."""
    seeds: dict[str, InteractionExample] = {}
    if seeds_dir is None or not seeds_dir.is_dir():
        return seeds
    own = skip.resolve()
    for folder in sorted(p for p in seeds_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.resolve() == own:
            continue
        for path in sorted(folder.glob("*.txt")):
            example = _read_seed(path, folder.name)
            if example is not None:
                seeds[example.id] = example
    return seeds


def _read_seed(path: Path, profile: str) -> InteractionExample | None:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("memory store: seed example %s cannot be read (%s); skipped", path, exc)
        return None
    instructions = tuple(Transcript.parse(text).instructions())
    if not instructions:
        log.warning("memory store: seed example %s has no wait_for_trigger()/ask() turn; it will never be retrieved", path)
    return InteractionExample(id=f"seed:{profile}/{path.stem}", profile=profile, source=SEED, transcript=text.strip(),
                              instructions=instructions)


def read_learned_jsonl(path: str | Path) -> tuple[list[InteractionExample], list[str]]:
    """The learned examples of a JSON Lines export (ids and creation times filled in), and the ids of its seed
    records (seeds are files shipped with the package, never imported). The whole file is checked: a
    MemoryStoreError names the first bad line."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise MemoryStoreError(f"cannot read {path}: {exc}") from None
    examples: list[InteractionExample] = []
    seeds: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MemoryStoreError(f"{where}: not JSON ({exc.msg})") from None
        example = InteractionExample.from_dict(record, where)
        if example.source == SEED:
            seeds.append(example.id)
            continue
        example = prepare_learned(example)
        try:
            validate_learned(example)
        except MemoryStoreError as exc:
            raise MemoryStoreError(f"{where}: {exc}") from None
        examples.append(example)
    return examples, seeds
