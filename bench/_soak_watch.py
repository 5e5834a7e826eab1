"""The soak's watch on this process (bench/soak.py): resident memory, threads, file descriptors, descendant
processes, zombies and escaped workers after each episode, and the least-squares slope of a series."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from teachbot.sandbox.os_layer import descendants


@dataclass(frozen=True)
class Sample:
    """This process after one episode."""

    episode: int
    kind: str
    rss_kib: int
    threads: int  # OS threads (/proc/self/task)
    py_threads: int  # threading.active_count()
    fds: int
    children: int  # every descendant process
    zombies: int  # descendants that exited and were not reaped
    escaped: int  # processes once below this one, still running, no longer below it (orphaned workers)


def rss_kib() -> int:
    """Resident memory of this process (VmRSS), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a process, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[0], int(fields[19])


class ProcessWatch:
    """Samples this process; remembers every descendant it saw (pid and start time), so that one that
    is orphaned but keeps running (a worker a kill missed) is counted as escaped."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def sample(self, episode: int, kind: str) -> Sample:
        gc.collect()  # cyclic garbage is not a leak; what survives a collection is
        below, escaped = self._look()
        if escaped:  # a tree being killed right now is no escape: look again a moment later
            time.sleep(0.5)
            below, escaped = self._look()
        self.seen.update(below)
        return Sample(episode, kind, rss_kib(), len(os.listdir("/proc/self/task")), threading.active_count(),
                      len(os.listdir("/proc/self/fd")), len(below),
                      sum(1 for pid in below if (_stat(pid) or ("",))[0] == "Z"), len(escaped))

    def _look(self) -> tuple[dict[int, int], list[int]]:
        """The descendants now (pid -> start time) and the seen ones still running elsewhere."""
        below = {pid: stat[1] for pid in descendants(os.getpid()) if (stat := _stat(pid)) is not None}
        now = {pid: _stat(pid) for pid in self.seen}
        self.seen = {pid: start for pid, start in self.seen.items() if now[pid] is not None and now[pid][1] == start}
        return below, [pid for pid in self.seen if pid not in below and now[pid][0] != "Z"]


def slope(values: Sequence[float]) -> float:
    """Least-squares slope per step of ``values`` (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    return float(np.polyfit(np.arange(len(values), dtype=float), np.asarray(values, dtype=float), 1)[0])
