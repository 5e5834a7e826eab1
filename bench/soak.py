#!/usr/bin/env python3
"""Soak: scripted console episodes back to back with learning on; the parent process must not grow.

The interaction core as the evaluation harness runs it, in this process without ROS: the real sandbox
(its worker under the deployed OS layer), the shipped interaction config (bounds, session rules, the
approval gate), the real episodic memory store in a temporary directory (the shipped seeds plus what
is learned) and the real improvement chain (``Improver`` behind the one ``Learner``, as the improvement node runs it). The models are
scripted and read their prompt: the robot takes the block the person meant only when the prompt holds
a learned example for this very request, otherwise the wrong one; the scripted person corrects it and
asks to remember, and learning stores an example. Every 10 episodes (periodic, so each quarter of the
run has the same mix):

* 8 pick episodes: 5 new requests (mistake, correction, learn_from_interaction(), redo) and 3
  requests learned before (right at once: the lesson was retrieved into the prompt);
* 1 busy loop that the sandbox's wall clock kills (--wall-time, default 1 s), so the worker respawns;
* 1 episode that calls say() 40 times with 1 500 characters each, then once over the say limit.

The robot is a fake by default: the tabletop API (teachbot.console.tabletop_api) over skills that move
objects in a dict at once. In deployment the simulator runs in its own process, and in this process
one pick-and-place of the PyBullet sim takes ~1 s of physics, which would only add its own allocations
to what is measured; ``--sim`` runs the in-process tabletop sim instead (the world reset each episode).

After every episode (and a gc.collect()): resident memory (VmRSS), threads (/proc/self/task and
threading.active_count()), open fds (/proc/self/fd), descendant processes (every process under this
one; a bubblewrap worker is three), zombies among them, and escaped ones (a descendant seen before,
now orphaned and still running: a worker a kill missed). Slopes per episode by a least-squares fit
over the second half. Per console statement, the console's own time: from one statement to the next,
less the model's latency and the time inside robot functions and learning (timed apart); p50/p90/p99
per quarter of the episodes after warm-up, the killed busy loops apart. At the end the memory store
is checked: every example learning added reads back equal (in this store and in a fresh MemoryStore
over the same directory), the index holds exactly the store's examples, every lesson is retrieved
first for its own request, nothing is quarantined and no temp file is left.

Goals: RSS slope <= 50 KiB/episode; threads, fds and descendants back to their count after warm-up
(slope 0), no zombie, none escaped, none left after close; p99 of the last quarter / p99 of the first
<= 1.5; every recalled request right at once; the store consistent.

Usage: python bench/soak.py [--episodes 200] [--quick] [--sim] [--embedder minilm|hash] [--wall-time 1] [--smoke]
"""

from __future__ import annotations

import _common as C

C.ensure_importable()

import dataclasses  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _soak_watch import ProcessWatch, Sample, slope  # noqa: E402
from _soak_world import (  # noqa: E402
    BOWLS,
    LOOP,
    SAYS,
    Episode,
    FakeSkills,
    HashEmbedder,
    Person,
    RecordingMemory,
    SimSkills,
    robot_answer,
    spoken,
    teacher_answer,
)

from teachbot.config import load_yaml, resolve_config  # noqa: E402
from teachbot.console.tabletop_api import TabletopRobot  # noqa: E402
from teachbot.interaction import CoreConfig, InteractionCore, LearnReply, LearnRequest, LocalExamples  # noqa: E402
from teachbot.interaction.core import ENDED  # noqa: E402
from teachbot.language.registry import RobotApi  # noqa: E402
from teachbot.language.transcript import Entry  # noqa: E402
from teachbot.learning.improver import Improver  # noqa: E402
from teachbot.learning.learner import Learner  # noqa: E402
from teachbot.llm.scripted import ScriptedModel  # noqa: E402
from teachbot.memory.config import MemoryConfig  # noqa: E402
from teachbot.memory.episodic import EpisodicMemory  # noqa: E402
from teachbot.memory.store import MemoryStore  # noqa: E402
from teachbot.sandbox.executor import SandboxLimits  # noqa: E402
from teachbot.storage.files import TEMP_SUFFIX  # noqa: E402
from teachbot.world.scene import TabletopConfig  # noqa: E402

GOAL_RSS_SLOPE_KIB = 50.0
GOAL_P99_RATIO = 1.5
KINDS = ("pick", "pick", "pick", "loop", "pick", "pick", "pick", "chatty", "pick", "pick")  # every 10 episodes


# ------------------------------------------------------------------ timing
class StepClock:
    """Per console statement, the console's own seconds: from one statement to the next, less the
    model's latency and the time inside robot functions and learning (``exclude``)."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, str, float]] = []  # (episode, statement, seconds)
        self._open: tuple[int, str, float] | None = None
        self._excluded = 0.0
        self.episode = 0

    def exclude(self, seconds: float) -> None:
        self._excluded += seconds

    def on_entry(self, _episode_id: str, entry: Entry, _first_line: int) -> None:
        if entry.kind == "code":
            self.close()
            self._open = (self.episode, entry.text, time.perf_counter())
            self._excluded = 0.0

    def close(self) -> None:
        """The open statement ends now (the next one starts, or the episode ended)."""
        if self._open is not None:
            episode, source, start = self._open
            self.steps.append((episode, source, time.perf_counter() - start - self._excluded))
            self._open = None

    def timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its time excluded from the statement that called it."""
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.exclude(time.perf_counter() - start)
        return call


class TimedLearner:
    """The learner with its time excluded from the learn statement and recorded apart."""

    def __init__(self, inner: Learner, clock: StepClock) -> None:
        self.inner, self.clock = inner, clock
        self.seconds: list[tuple[int, float]] = []  # (episode, seconds) of each learning call

    def improve(self, request: LearnRequest, timeout: float) -> LearnReply:
        start = time.perf_counter()
        try:
            return self.inner.improve(request, timeout)
        finally:
            took = time.perf_counter() - start
            self.clock.exclude(took)
            self.seconds.append((self.clock.episode, took))


# ------------------------------------------------------------------ the soak
@dataclass
class Soak:
    """Everything the episodes run on, in ``workdir`` (a temporary directory when empty)."""

    sim: bool = False
    embedder: str = "minilm"  # minilm (the real all-MiniLM-L6-v2, cached in workdir) or hash
    wall_time: float = 1.0
    workdir: str = ""
    samples: list[Sample] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    recall_misses: list[int] = field(default_factory=list)  # recall episodes the robot got wrong at first
    reasons: dict[str, int] = field(default_factory=dict)  # why episodes ended, counted

    def __post_init__(self) -> None:
        self._tmp = None if self.workdir else tempfile.TemporaryDirectory(prefix="teachbot-soak-")
        root = Path(self.workdir or self._tmp.name)
        config = MemoryConfig.from_mapping({"memory": {
            "store": {"seeds_dir": "memory_store", "learned_dir": str(root / "learned")},
            "embedding": {"cache_dir": str(root / "cache")}}})
        self.memory = EpisodicMemory.open(config, embedder=HashEmbedder() if self.embedder == "hash" else None)
        self.memory.warm_up()  # as the node does at start: loading the model is no console statement's time
        self.recorded = RecordingMemory(self.memory)
        table = TabletopConfig.load()
        self.skills: FakeSkills | SimSkills = SimSkills(table) if self.sim else FakeSkills(table)
        self.person = Person()
        self.clock = StepClock()
        self.watch = ProcessWatch()
        # a short history: the real backends keep 100 completions, the scripted default of 1000 would fill up in the run
        self.robot = ScriptedModel(respond=robot_answer, name="interaction:soak", history_size=10)
        self.robot.add_listener(lambda completion, _prompt: self.clock.exclude(completion.latency))
        self.teacher = ScriptedModel(respond=teacher_answer, name="improvement:soak", history_size=10)
        api = RobotApi.load("tabletop")
        robot = TabletopRobot(self.skills, lambda: self.skills.positions, self.person, table)
        functions = {name: self.clock.timed(fn) for name, fn in robot.functions().items()}
        put = functions["put_first_on_second"]
        functions["put_first_on_second"] = lambda obj, target, **kw: self._moved(obj, target, put(obj, target, **kw))
        self.learner = TimedLearner(Learner.in_process(Improver(self.teacher, api), self.recorded), self.clock)
        interaction = load_yaml(resolve_config("interaction")).get("interaction", {})
        learning = load_yaml(resolve_config("learning")).get("learning", {})
        sandbox = load_yaml(resolve_config("sandbox")).get("limits", {})
        self.core = InteractionCore(
            api, functions, self.person, self.robot, function_model=ScriptedModel([]),
            examples=LocalExamples(memory=self.memory), config=CoreConfig.from_config(interaction, learning),
            learner=self.learner, scene_objects=lambda: sorted(self.skills.positions),
            limits=dataclasses.replace(SandboxLimits.from_config(sandbox), wall_time=self.wall_time),
            on_entry=self.clock.on_entry)
        self._learned_requests: list[str] = []
        self._orders = 0

    def _moved(self, obj: str, target: Any, result: Any) -> Any:
        self.person.moves.append((obj, str(target)))
        return result

    def next_episode(self) -> Episode:
        i = len(self.episodes)
        kind = KINDS[i % len(KINDS)]
        if kind == "loop":
            return Episode(i, kind, f"count to infinity please, round {spoken(i)}")
        if kind == "chatty":
            return Episode(i, kind, f"tell me everything you see, round {spoken(i)}")
        if self._learned_requests and i % 2 == 1:
            return Episode(i, kind, self._learned_requests[(i // 2) % len(self._learned_requests)], recall=True)
        self._orders += 1
        return Episode(i, kind, f"order {spoken(self._orders)}: put the block in the {BOWLS[self._orders % 2]}")

    def run_episode(self) -> Sample:
        """One episode of the schedule, then a sample of this process."""
        episode = self.next_episode()
        self.episodes.append(episode)
        self.skills.reset()
        self.person.begin(episode)
        self.clock.episode = episode.index
        added = len(self.recorded.added)
        reason = self.core.run_episode()
        self.clock.close()
        self.robot.prompts.clear()  # the scripted models' record of every prompt is the test double's, not the console's
        self.teacher.prompts.clear()
        key = reason if reason == ENDED else reason.split(":")[0]
        self.reasons[key] = self.reasons.get(key, 0) + 1
        if episode.recall and (self.person.corrected or not self.person.satisfied):
            self.recall_misses.append(episode.index)
        if len(self.recorded.added) > added:
            self._learned_requests.append(episode.request)
        self.samples.append(self.watch.sample(episode.index, episode.kind))
        return self.samples[-1]

    def check_store(self) -> list[str]:
        """What is wrong with the memory store after the run (empty: consistent)."""
        problems: list[str] = []
        store, added = self.memory.store, self.recorded.added
        keys = ("profile", "source", "transcript", "instructions", "problem", "improvement", "scope", "episode_id")
        fresh = MemoryStore(store.learned_dir, store.seeds_dir)  # what a new process reads from disk
        for reader, where in ((store, "the store"), (fresh, "a fresh store")):
            learned = {e.id: e for e in reader.list(source="learned")}
            if learned.keys() != added.keys():
                problems.append(f"{where} lists {len(learned)} learned examples, {len(added)} were added "
                                f"(missing {sorted(added.keys() - learned.keys())[:3]}, extra {sorted(learned.keys() - added.keys())[:3]})")
            for example_id, example in added.items():
                got = learned.get(example_id)
                if got is not None and any(getattr(got, k) != getattr(example, k) for k in keys):
                    problems.append(f"{where}: example {example_id} reads back different from what was added")
        self.memory.sync()
        if self.memory.retriever.ids != {e.id for e in store.list()}:
            problems.append(f"the index holds {len(self.memory.retriever)} examples, the store {len(store)}")
        for example_id, example in added.items():
            found = self.memory.retrieve(list(reversed(example.instructions)), example.profile, k=1)
            if not found or found[-1].example.id != example_id:
                problems.append(f"example {example_id} is not retrieved first for its own request {example.instructions!r}")
        quarantined = sorted(store.quarantine_dir.iterdir()) if store.quarantine_dir.is_dir() else []
        if quarantined:
            problems.append(f"quarantined: {[p.name for p in quarantined][:3]}")
        temps = [p.name for p in store.learned_dir.iterdir() if p.name.endswith(TEMP_SUFFIX)]
        if temps:
            problems.append(f"temp files left: {temps[:3]}")
        return problems

    def close(self) -> Sample:
        """Shut the console down; returns a sample of what is left (no descendants, none escaped)."""
        self.core.close()
        self.core.shutdown()
        if isinstance(self.skills, SimSkills):
            self.skills.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        return self.watch.sample(len(self.samples), "closed")


# ------------------------------------------------------------------ figures
def growth(samples: Sequence[Sample], attr: str, warmup: int) -> dict[str, Any]:
    """A resource over the run: after warm-up, last, min/max after warm-up, slope over the second half."""
    values = [getattr(s, attr) for s in samples]
    after = values[warmup:] or values
    half = values[len(values) // 2:]
    return {"first": values[0], "after_warmup": after[0], "last": values[-1], "min": min(after), "max": max(after),
            "growth": values[-1] - after[0], "slope_per_episode": round(slope(half), 4) + 0.0}


def step_quarters(soak: Soak, warmup: int, episodes: int) -> list[dict[str, Any]]:
    """Console statement times (ms) per quarter of the episodes after warm-up, the killed busy loops apart."""
    quarters = []
    for q in range(4):
        lo, hi = warmup + (episodes - warmup) * q // 4, warmup + (episodes - warmup) * (q + 1) // 4
        own = [s * 1e3 for e, src, s in soak.clock.steps if lo <= e < hi and src != LOOP]
        kills = [s * 1e3 for e, src, s in soak.clock.steps if lo <= e < hi and src == LOOP]
        learns = [s * 1e3 for e, s in soak.learner.seconds if lo <= e < hi]
        quarters.append({"episodes": [lo, hi - 1], "n": len(own),
                         **({"p50": round(C.percentile(own, 50), 3), "p90": round(C.percentile(own, 90), 3),
                             "p99": round(C.percentile(own, 99), 3)} if own else {}),
                         "kill_median_ms": round(statistics.median(kills), 1) if kills else None,
                         "learn_median_ms": round(statistics.median(learns), 2) if learns else None})
    return quarters


def report(soak: Soak, warmup: int, wall_s: float, store_problems: list[str], left: Sample) -> dict[str, Any]:
    """The JSON line's fields."""
    n = len(soak.samples)
    rss = growth(soak.samples, "rss_kib", warmup)
    counts = {attr: growth(soak.samples, attr, warmup) for attr in ("threads", "py_threads", "fds", "children")}
    quarters = step_quarters(soak, warmup, n)
    p99_first, p99_last = quarters[0].get("p99"), quarters[-1].get("p99")
    ratio = round(p99_last / p99_first, 3) if p99_first and p99_last else None
    rss_slope = rss["slope_per_episode"]
    flat = all(c["growth"] == 0 and c["slope_per_episode"] == 0 for c in counts.values())
    zombies = max(s.zombies for s in soak.samples)
    escaped = max(s.escaped for s in [*soak.samples, left])
    recalls = sum(1 for e in soak.episodes if e.recall)
    return {
        "benchmark": "soak", "episodes": n, "warmup": warmup, "robot": "sim" if soak.sim else "fake",
        "embedder": soak.embedder, "wall_time_s": soak.wall_time, "wall_s": round(wall_s, 1),
        "rss_slope_kib_per_episode": rss_slope, **C.goal_fields(rss_slope, GOAL_RSS_SLOPE_KIB),
        "rss_kib": rss, **counts, "zombies_max": zombies, "escaped_max": escaped, "counts_flat": flat,
        "descendants_after_close": left.children,
        "step_ms_quarters": quarters, "p99_first_ms": p99_first, "p99_last_ms": p99_last,
        "p99_ratio_last_first": ratio, "goal_p99_ratio": GOAL_P99_RATIO,
        "meets_goal_p99_ratio": ratio is not None and ratio <= GOAL_P99_RATIO,
        "kills": sum(1 for _, src, _ in soak.clock.steps if src == LOOP),
        "say_calls": SAYS * sum(1 for e in soak.episodes if e.kind == "chatty"),
        "learned": len(soak.recorded.added), "recalls": recalls, "recall_misses": len(soak.recall_misses),
        "episode_ends": soak.reasons, "store_consistent": not store_problems, "store_problems": store_problems[:5],
        "meets_goals": bool(rss_slope <= GOAL_RSS_SLOPE_KIB and flat and zombies == escaped == left.children == 0
                            and not store_problems
                            and ratio is not None and ratio <= GOAL_P99_RATIO and not soak.recall_misses),
        "machine": C.machine(),
    }


def run(episodes: int, warmup: int, *, progress: Callable[[Sample], None] | None = None, **options: Any) -> dict[str, Any]:
    """The whole soak: ``episodes`` episodes, the store check, the report."""
    soak = Soak(**options)
    start = time.perf_counter()
    try:
        for _ in range(episodes):
            done = soak.run_episode()
            if progress is not None:
                progress(done)
        store_problems = soak.check_store()
    finally:
        left = soak.close()
    return report(soak, warmup, time.perf_counter() - start, store_problems, left)


def short_form(episodes: int = 30) -> dict[str, Any]:
    """The form test/test_soak.py runs in a fresh process: the hashing embedder, every episode's sample,
    the store check and what is left after close."""
    soak = Soak(embedder="hash")
    try:
        for _ in range(episodes):
            soak.run_episode()
        store_problems = soak.check_store()
    finally:
        left = soak.close()
    return {"samples": [dataclasses.asdict(s) for s in soak.samples], "left": dataclasses.asdict(left),
            "store_problems": store_problems, "learned": len(soak.recorded.added),
            "recalls": sum(1 for e in soak.episodes if e.recall), "recall_misses": soak.recall_misses,
            "kills": sum(1 for _, src, _ in soak.clock.steps if src == LOOP), "said_kept": len(soak.person.said),
            "kinds": [e.kind for e in soak.episodes]}


def main() -> None:
    parser = C.parser(__doc__.splitlines()[0], runs=None, smoke={"episodes": 10, "warmup": 2, "embedder": "hash"})
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="30 episodes with the hashing embedder (the test's form)")
    parser.add_argument("--sim", action="store_true", help="the PyBullet tabletop sim in this process instead of fake skills")
    parser.add_argument("--embedder", choices=("minilm", "hash"), default="minilm")
    parser.add_argument("--wall-time", type=float, default=1.0, help="the sandbox's wall clock per snippet (s)")
    parser.add_argument("--warmup", type=int, default=10, help="episodes before the baseline counts")
    args = parser.parse_args()
    C.setup()
    episodes, embedder = (30, "hash") if args.quick else (args.episodes, args.embedder)

    def progress(s: Sample) -> None:
        if s.episode % 10 == 9 or s.episode == episodes - 1:
            print(f"episode {s.episode + 1}/{episodes}: rss {s.rss_kib / 1024:.1f} MiB, threads {s.threads}, "
                  f"fds {s.fds}, descendants {s.children}", file=sys.stderr, flush=True)

    result = run(episodes, min(args.warmup, episodes - 1), progress=progress, sim=args.sim, embedder=embedder,
                 wall_time=args.wall_time)
    quarters = "; ".join(f"q{i + 1} p50 {q.get('p50')} p99 {q.get('p99')} ms" for i, q in enumerate(result["step_ms_quarters"]))
    print(f"soak, {result['episodes']} episodes ({result['robot']} robot, {result['embedder']} embedder) in "
          f"{result['wall_s']} s: RSS slope {result['rss_slope_kib_per_episode']} KiB/episode (goal <= {GOAL_RSS_SLOPE_KIB}), "
          f"{result['rss_kib']['after_warmup'] / 1024:.1f} -> {result['rss_kib']['last'] / 1024:.1f} MiB\n"
          + "".join(f"  {k}: {result[k]['after_warmup']} after warm-up -> {result[k]['last']} (slope {result[k]['slope_per_episode']})\n"
                    for k in ("threads", "py_threads", "fds", "children"))
          + f"  zombies at most {result['zombies_max']}, escaped (orphaned, still running) at most {result['escaped_max']}, "
          f"descendants after close {result['descendants_after_close']}\n"
          + f"  console statement: {quarters}; p99 last/first {result['p99_ratio_last_first']} (goal <= {GOAL_P99_RATIO})\n"
          f"  {result['kills']} workers killed and respawned, {result['say_calls']} say() calls, {result['learned']} examples "
          f"learned, {result['recalls'] - result['recall_misses']}/{result['recalls']} recalled right at once; store "
          + ("consistent" if result["store_consistent"] else f"INCONSISTENT: {result['store_problems']}"),
          file=sys.stderr, flush=True)
    C.emit(result)


if __name__ == "__main__":
    main()
