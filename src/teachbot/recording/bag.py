"""rosbag2 files of teachbot sessions: writing raw CDR messages, reading a session back. ROS-free.

A session bag is an ordinary rosbag2 (MCAP by default, sqlite3 on request) written with ``rosbags``:
every connection carries its ros2msg schema and offered QoS, so ``ros2 bag info``, ``mcap info`` and
Foxglove read it. Besides the recorded topics it holds two records the recorder writes itself:

- ``/teachbot/session`` (std_msgs/String, JSON): the :class:`SessionSpec`, i.e. what a replay needs
  to rebuild the stack: robot profile, the scene exactly as the simulator loaded it (seed or YAML),
  the interaction manager's overrides, memory and learning settings;
- ``/teachbot/world_state`` (teachbot_interfaces/srv/GetWorldState_Response): the simulator's ground
  truth when recording started and when it stopped.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import Reader, Writer
from rosbags.rosbag2.enums import StoragePlugin

from teachbot.errors import TeachbotError
from teachbot.recording.types import typestore

SESSION_TOPIC = "/teachbot/session"
WORLD_STATE_TOPIC = "/teachbot/world_state"
STRING_TYPE = "std_msgs/msg/String"
WORLD_STATE_TYPE = "teachbot_interfaces/srv/GetWorldState_Response"
STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
SESSION_END = "SessionEnded"  # the console's output line when the person leaves


class BagError(TeachbotError):
    """A bag cannot be written or read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class TopicSpec:
    """A recorded topic: name, ROS type (``pkg/msg/Type``) and the QoS its publisher offers."""

    name: str
    msgtype: str
    depth: int = 10
    reliable: bool = True
    transient_local: bool = False

    def qos(self) -> Qos:
        """The offered QoS as rosbag2 metadata stores it."""
        return Qos(
            QosHistory.KEEP_LAST, self.depth,
            QosReliability.RELIABLE if self.reliable else QosReliability.BEST_EFFORT,
            QosDurability.TRANSIENT_LOCAL if self.transient_local else QosDurability.VOLATILE,
            QosTime(0, 0), QosTime(0, 0), QosLiveliness.AUTOMATIC, QosTime(0, 0), False,
        )


@dataclass
class SessionSpec:
    """What a replay needs to rebuild the recorded stack (stored as JSON in the bag)."""

    robot_profile: str = "panda_sim"
    scene_yaml: str = ""           # the scene as the simulator loaded it (SceneSpec.to_yaml())
    seed: int | None = None        # set for a generated scene: replays regenerate it exactly
    interaction: dict[str, Any] = field(default_factory=dict)   # InteractionManagerNode overrides
    memory: bool = True            # memory + improvement nodes ran (seed examples + a fresh learned store)
    learning_mode: str = "improve"
    real_time_factor: float = 1.0
    title: str = ""
    version: int = 1

    def to_json(self) -> str:
        """The spec as the JSON text stored in the bag."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SessionSpec:
        """Parse the JSON of :meth:`to_json`; unknown keys (from a newer version) are ignored."""
        raw = json.loads(text)
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


class BagWriter:
    """Writer of raw CDR messages into a new rosbag2 directory, safe to call from any thread.

    One thread owns the rosbags writer (sqlite3 connections may only be used by the thread that made
    them); the callers only queue work, so a subscription callback never waits for the disk.
    """

    def __init__(self, path: str | Path, storage: str = "mcap") -> None:
        if storage not in STORAGES:
            raise BagError(f"unknown bag storage {storage!r}; use one of {', '.join(STORAGES)}")
        self.path = Path(path)
        if self.path.exists():
            raise BagError(f"{self.path} exists already; a recording never overwrites one (choose another path)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._store = typestore()
        self._jobs: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._topics: set[str] = set()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self.closed = False
        opened = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(STORAGES[storage], opened), daemon=True, name="bag-writer")
        self._thread.start()
        opened.wait()
        if self._error is not None:
            raise BagError(f"cannot create bag {self.path}: {self._error}")

    def _run(self, plugin: StoragePlugin, opened: threading.Event) -> None:
        try:
            writer = Writer(self.path, version=9, storage_plugin=plugin)
            writer.open()
        except Exception as exc:  # noqa: BLE001 - reported by the constructor
            self._error = exc
            opened.set()
            return
        opened.set()
        connections: dict[str, Any] = {}
        while (job := self._jobs.get()) is not None:
            kind, payload = job
            try:
                if kind == "topic":
                    spec: TopicSpec = payload
                    connections[spec.name] = writer.add_connection(spec.name, spec.msgtype, typestore=self._store,
                                                                   offered_qos_profiles=[spec.qos()])
                else:
                    topic, data, stamp = payload
                    writer.write(connections[topic], stamp, data)
            except Exception as exc:  # noqa: BLE001 - kept and raised by close()
                self._error = self._error or exc
        writer.close()

    def add_topic(self, spec: TopicSpec) -> None:
        """Declare a topic (once; later calls for the same name are ignored)."""
        with self._lock:
            if spec.name not in self._topics and not self.closed:
                self._topics.add(spec.name)
                self._jobs.put(("topic", spec))

    def write(self, topic: str, data: bytes, timestamp_ns: int) -> None:
        """Append one serialized message of a declared topic (dropped once the bag is closed)."""
        if not self.closed:
            self._jobs.put(("message", (topic, bytes(data), timestamp_ns)))

    def write_string(self, topic: str, text: str, timestamp_ns: int) -> None:
        """A std_msgs/String record (declares the topic on first use)."""
        self.add_topic(TopicSpec(topic, STRING_TYPE, depth=1, transient_local=True))
        msg = self._store.types[STRING_TYPE](data=text)
        self.write(topic, bytes(self._store.serialize_cdr(msg, STRING_TYPE)), timestamp_ns)

    def close(self) -> None:
        """Write what is queued, finish the file (summary, metadata.yaml); raise what went wrong while writing."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._jobs.put(None)
        self._thread.join()
        if self._error is not None:
            raise BagError(f"writing {self.path} failed: {self._error}")


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class RecordedCompletion:
    """One LLM call of the session."""

    role: str
    prompt_digest: str
    prompt: str
    text: str
    stamp_ns: int


@dataclass(frozen=True)
class ObjectRecord:
    """One object of a world state: position (metres) and its relations."""

    name: str
    position: tuple[float, float, float]
    supported_by: str
    inside: bool
    held: bool


@dataclass(frozen=True)
class WorldRecord:
    """The simulator's ground truth at one instant."""

    objects: tuple[ObjectRecord, ...]
    held_object: str
    seed: int
    sim_time: float

    def by_name(self) -> dict[str, ObjectRecord]:
        """Objects keyed by name."""
        return {o.name: o for o in self.objects}


@dataclass
class RecordedSession:
    """A session bag decoded into what replay and comparison need."""

    path: Path
    spec: SessionSpec
    completions: list[RecordedCompletion]
    user: list[str]
    robot: list[str]
    episodes: list[list[str]]
    world_states: list[WorldRecord]
    topics: dict[str, tuple[str, int]]   # name -> (type, message count)
    start_ns: int
    end_ns: int
    storage: str

    @property
    def duration(self) -> float:
        """Seconds from the first to the last message."""
        return max(0, self.end_ns - self.start_ns) * 1e-9

    @property
    def transcript(self) -> list[str]:
        """Every episode's lines, one after another."""
        return [line for episode in self.episodes for line in episode]

    def completions_for(self, role: str) -> list[RecordedCompletion]:
        """The completions of one LLM role, in the order they were asked for."""
        return [c for c in self.completions if c.role == role]

    @property
    def final_world(self) -> WorldRecord | None:
        """The ground truth when recording stopped."""
        return self.world_states[-1] if self.world_states else None

    @classmethod
    def load(cls, path: str | Path) -> RecordedSession:
        """Decode a bag written by the recorder."""
        return _load(Path(path))


def world_record(msg: Any) -> WorldRecord:
    """The WorldRecord of a teachbot_interfaces WorldState message (recorded or asked of the sim)."""
    objects = tuple(
        ObjectRecord(o.name, (o.pose.position.x, o.pose.position.y, o.pose.position.z), o.supported_by, bool(o.inside), bool(o.held))
        for o in msg.objects
    )
    return WorldRecord(objects, msg.held_object, int(msg.seed), float(msg.sim_time))


def _load(path: Path) -> RecordedSession:
    if not (path / "metadata.yaml").is_file():
        raise BagError(f"{path} is not a rosbag2 directory (no metadata.yaml); record one with `teachbot record`")
    store = typestore()
    spec: SessionSpec | None = None
    completions: list[RecordedCompletion] = []
    user: list[str] = []
    robot: list[str] = []
    episodes: dict[str, dict[int, str]] = {}
    worlds: list[WorldRecord] = []
    wanted = {"interaction/completions", "improvement/completions", "dialog/user", "dialog/robot", "interaction/transcript"}
    try:
        reader = Reader(path)
        reader.open()
    except Exception as exc:  # noqa: BLE001 - rosbags raises several types for a damaged bag
        raise BagError(f"cannot open bag {path}: {exc}") from None
    try:
        topics = {c.topic: (c.msgtype, c.msgcount) for c in reader.connections}
        connections = [c for c in reader.connections if c.topic.lstrip("/") in wanted or c.topic in (SESSION_TOPIC, WORLD_STATE_TOPIC)]
        for conn, _stamp, raw in reader.messages(connections=connections):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            topic = conn.topic.lstrip("/")
            if conn.topic == SESSION_TOPIC:
                spec = SessionSpec.from_json(msg.data)
            elif conn.topic == WORLD_STATE_TOPIC:
                worlds.append(world_record(msg))
            elif topic.endswith("completions"):
                stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
                completions.append(RecordedCompletion(msg.role, msg.prompt_digest, msg.prompt, msg.completion, stamp))
            elif topic == "dialog/user":
                user.append(msg.text)
            elif topic == "dialog/robot":
                robot.append(msg.text)
            elif topic == "interaction/transcript":
                lines = episodes.setdefault(msg.episode_id, {})
                for offset, line in enumerate(msg.lines):
                    lines[msg.first_line + offset] = line
        start, end = reader.start_time, reader.end_time
    finally:
        reader.close()
    if spec is None:
        raise BagError(f"{path} has no {SESSION_TOPIC} record; it was not written by teachbot's recorder")
    ordered = [[lines[i] for i in sorted(lines)] for lines in episodes.values()]
    return RecordedSession(path, spec, completions, user, robot, ordered, worlds, topics, start, end, _storage_of(path))


def _storage_of(path: Path) -> str:
    return "mcap" if any(path.glob("*.mcap")) else "sqlite3"
