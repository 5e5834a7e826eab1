"""The soak's short form (bench/soak.py): 30 scripted episodes with learning, sandbox workers killed by
the wall clock and respawned, and say() in loops leave the process's threads, open fds and child
processes exactly at their count after warm-up, its memory about flat, no worker orphaned, and the
memory store consistent. It runs in a fresh process, so no other test's threads or children count."""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from timing import pytest_timeout, timeout

BENCH = Path(__file__).resolve().parents[1] / "bench"
EPISODES, WARMUP = 30, 10
pytestmark = pytest.mark.timeout(pytest_timeout(240))


@pytest.fixture(scope="module")
def soak() -> dict:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the spawned process takes this sys.path: `soak` and `_common` import there
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_short_form, EPISODES).result(timeout=timeout(200))


def _short_form(episodes: int) -> dict:
    import soak

    return soak.short_form(episodes)


def test_the_schedule_covers_learning_recall_kills_and_say_loops(soak):
    kinds = soak["kinds"]
    assert kinds.count("loop") == soak["kills"] == 3  # each busy loop was killed by the wall clock
    assert kinds.count("chatty") == 3
    assert soak["learned"] >= 10 and soak["recalls"] >= 5
    assert soak["recall_misses"] == []  # every learned request was right at once: the lesson reached the prompt
    assert soak["said_kept"] <= 50  # 120 sentences said, the dialog keeps its bound (max_said_kept)


def test_threads_fds_and_children_return_to_their_count_after_warm_up(soak):
    samples = soak["samples"]
    assert len(samples) == EPISODES
    base = samples[WARMUP]
    assert base["children"] in (1, 3)  # the worker alone (seccomp), or bwrap, its namespace init and the worker
    for s in samples[WARMUP:]:
        counts = {k: s[k] for k in ("py_threads", "fds", "children")}
        assert counts == {k: base[k] for k in counts}, f"episode {s['episode']} ({s['kind']}): {counts}, after warm-up {base}"
        # an OS thread that is ending as the sample is taken (seen at load 15) may count once; a leaked one stays
        assert s["threads"] <= base["threads"] + 1, f"episode {s['episode']} ({s['kind']}): {s['threads']} threads, after warm-up {base}"
    last = samples[-(EPISODES - WARMUP) // 2:]  # the second half after warm-up (the base sample not among them)
    floor = min(s["threads"] for s in last)
    assert floor == base["threads"], f"the last {len(last)} episodes never came back to {base['threads']} OS threads: a leak"
    assert max(s["zombies"] for s in samples) == 0
    assert max(s["escaped"] for s in samples) == 0  # no killed worker left running outside the tree


def test_nothing_is_left_after_close(soak):
    left = soak["left"]
    assert left["children"] == 0 and left["escaped"] == 0


def test_memory_stays_about_flat(soak):
    rss = [s["rss_kib"] for s in soak["samples"]]
    assert rss[-1] - rss[-21] < 20 * 1024, f"RSS grew {(rss[-1] - rss[-21]) / 1024:.1f} MiB over the last 20 episodes"


def test_the_memory_store_is_consistent(soak):
    assert soak["store_problems"] == []
