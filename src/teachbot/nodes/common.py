"""Small helpers every teachbot node shares: QoS profiles, start-up checks, the main() runner."""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rclpy
from opentelemetry.trace import SpanKind
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.task import Future
from teachbot_interfaces.msg import LlmCompletion

from teachbot.errors import TeachbotError
from teachbot.llm.pricing import PriceTable
from teachbot.ros_env import LockDirectoryError, configure_loopback, user_directory
from teachbot.tracing import fail, set_attributes, span
from teachbot.tracing.setup import configure as configure_tracing

SENSOR_QOS = qos_profile_sensor_data  # camera images: best effort, latest only
COMMAND_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# state a late joiner needs at once (object list, world state): reliable, last sample kept for it
LATCHED_QOS = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)


# how a wait on a server ended (wait_served): answered, ran out of time, the server left the graph (GONE), or
# the caller's ``stop`` said to stop waiting (STOPPED)
DONE, TIMEOUT, GONE, STOPPED = "done", "timeout", "gone", "stopped"
GONE_POLL = 0.1  # seconds between checks that the server of a pending call is still on the graph


def wait_served(future: Any, timeout: float, ready: Callable[[], bool], poll: float = GONE_POLL,
                stop: Callable[[], bool] | None = None) -> str:
    """Wait up to ``timeout`` for ``future`` while its server is on the graph: DONE, TIMEOUT, GONE when
    ``ready()`` (the client's server_is_ready/service_is_ready), true at some point, turns false, or STOPPED
    when ``stop()`` turns true (checked as often as ``ready``).

    Fast DDS drops a participant killed with kill -9 after its lease (config/fastdds_localhost.xml,
    about 1 s), so a dead server is noticed within that instead of at the end of ``timeout``.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    seen = ready()  # a server that serves now and leaves before its first poll is gone too
    while not (future.done() or done.wait(max(0.0, min(poll, deadline - time.monotonic())))):
        if stop is not None and stop():
            return STOPPED
        if ready():
            seen = True
        elif seen:
            return GONE
        if time.monotonic() >= deadline:
            return TIMEOUT
    return DONE


async def wait_for_worker(node: Node, work: concurrent.futures.Future[Any]) -> Any:
    """Await a worker thread's result inside an executor callback, then return it (or raise).

    rclpy resumes a waiting coroutine only when its executor wakes up for something; a node alone in
    its process (ros2 launch) may have nothing else to wake it, so completion wakes it explicitly."""
    done: Future = Future()
    executor = node.executor

    def finished(_work: concurrent.futures.Future[Any]) -> None:
        done.set_result(True)
        if executor is not None:
            # a shutting-down executor may have dropped its guard condition: nothing left to wake then
            with contextlib.suppress(Exception):
                executor.wake()

    work.add_done_callback(finished)
    await done
    return work.result()
# a session's history (transcript, LLM completions): a late joiner such as a recorder gets all of it
TRANSCRIPT_QOS = QoSProfile(
    depth=500, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def completion_publisher(node: Node, publisher: Any, role: str, prices: Any = None) -> Callable[[Any, str], None]:
    """A model listener that publishes each LLM call of ``role`` on ``publisher`` (an LlmCompletion
    publisher, TRANSCRIPT_QOS) with its prompt digest: what a recorded session is replayed from.
    ``prices`` (a teachbot.llm.pricing.PriceTable, default config/prices.yaml) gives each call's cost."""


    table = prices if prices is not None else PriceTable.load()

    def publish(completion: Any, prompt: str) -> None:
        msg = LlmCompletion(
            role=role, model=completion.model, prompt_digest=completion.prompt_digest, prompt=prompt,
            completion=completion.text, prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens, cached_tokens=completion.cached_tokens,
            latency=completion.latency, finish_reason=completion.finish_reason, cost_usd=table.cost(completion),
        )
        msg.header.stamp = node.get_clock().now().to_msg()
        publisher.publish(msg)

    return publish


class DuplicateNodeError(RuntimeError):
    """Another node of the same name is already running in this ROS domain."""


LOCK_ROOT = "teachbot-nodes"  # under the temporary directory, one folder per user: teachbot-nodes-<uid>
# a node that lost the name lock leaves the graph as its process exits, and a node killed with kill -9 drops
# off after the DDS lease (1.5 s, config/fastdds_localhost.xml); one still there after this runs elsewhere
GRAPH_GRACE = 3.0  # seconds


def lock_directory() -> Path:
    """Where the node name locks live: ``<tmp>/teachbot-nodes-<uid>``, next to the ROS domain reservations
    (teachbot.ros_env), so every process that can share a domain with another also shares its locks.

    A directory of this user's with mode 0700 (:func:`teachbot.ros_env.user_directory`): a link in its place,
    another user's directory or a file is refused with LockDirectoryError, never followed."""
    return user_directory(LOCK_ROOT)


def open_lock_file(path: Path) -> int:
    """Open (or create, mode 0600) the lock file ``path`` without following a link and without truncating it.

    LockDirectoryError when what is there is not a plain file of this user's with one name (a link, a hard link
    or a file another user made while the directory was open to others): a lock taken there could truncate
    another of this user's files."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise LockDirectoryError(f"{path} is a link; teachbot opens no lock file through a link: remove it") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1:
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(info.st_mode) else \
            f"owned by another user (uid {info.st_uid})" if info.st_uid != os.getuid() else "a hard link to another file"
        raise LockDirectoryError(f"{path} is {what}; teachbot takes its locks only on files of its own: remove it")
    return fd


class NodeNameLock:
    """A host-wide advisory lock (flock) on one node name in one ROS domain.

    The kernel releases it when the process dies, also on kill -9, so it never goes stale. Locks on separate
    open files conflict within one process too: a second node of the name in the same process is refused."""

    def __init__(self, domain: int, full_name: str) -> None:
        """Open the lock file of ``full_name`` (e.g. /robot1/sim) in ``domain``; :meth:`acquire` takes it."""
        self.domain, self.full_name = domain, full_name
        self.path = lock_directory() / f"domain{domain}.{re.sub(r'[^A-Za-z0-9_]', '.', full_name.strip('/'))}.lock"
        self._fd: int | None = open_lock_file(self.path)
        self._closer = weakref.finalize(self, os.close, self._fd)  # a lock dropped unreleased still lets go

    def acquire(self) -> bool:
        """Take the lock without waiting and write this process's id into the file; False if it is held."""
        if self._fd is None:
            raise RuntimeError(f"the lock on {self.full_name} was released; open a new NodeNameLock")
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def holder(self) -> str:
        """Who holds the lock, for an error message: 'this process', 'process <pid>' or 'another process'."""
        text, patience = "", time.monotonic() + 0.2  # the holder writes its id just after it took the lock
        while self._fd is not None and not text and time.monotonic() < patience:
            text = os.pread(self._fd, 32, 0).decode(errors="replace").strip()
            time.sleep(0.0 if text else 0.005)
        if text == str(os.getpid()):
            return "this process"
        return f"process {text}" if text.isdigit() else "another process"

    def release(self) -> None:
        """Let go of the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):  # unlocked explicitly: a forked child's copy of the file must not hold it
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._closer()


def refuse_duplicate(node: Node, wait: float = 0.4) -> None:
    """Raise DuplicateNodeError when a node with this node's full name already runs in its ROS domain.

    On this machine a :class:`NodeNameLock` decides at once and exactly (two processes started at the same
    instant cannot both pass); it is held until ``node.destroy_node()``, which this wraps to release it
    (rclpy.shutdown() destroys a context's nodes through the same call). Then for ``wait`` seconds the ROS
    graph is watched for the name on another machine; a second node there counts only while it stays on the
    graph for :data:`GRAPH_GRACE` s (a node here that lost the lock, or one killed with kill -9, leaves it).
    A refused node is destroyed before the error is raised."""
    full = node.get_fully_qualified_name()
    domain = node.context.get_domain_id()
    lock = NodeNameLock(domain, full)
    advice = f"stop it or start this one under another name (--ros-args -r __node:={node.get_name()}_2)"
    where = ""
    if not lock.acquire():
        where = f"on this machine ({lock.holder()})"
    else:
        try:
            if _seen_twice(node, full, wait):
                where = "elsewhere (on the ROS graph, but not holding its name lock here: another machine or user)"
        except BaseException:
            lock.release()
            raise
    if where:
        lock.release()
        node.destroy_node()  # the refused node's constructor never returns: nobody else could take it off the graph
        raise DuplicateNodeError(f"a node named {full} is already running in ROS_DOMAIN_ID={domain} {where}; {advice}")
    destroy = node.destroy_node  # the class's own (or a subclass's), bound to this node

    def destroy_node() -> None:
        try:
            destroy()
        finally:
            lock.release()  # after the node has left the graph: a successor then finds only itself there

    node.destroy_node = destroy_node  # type: ignore[method-assign]


def _seen_twice(node: Node, full: str, wait: float) -> bool:
    """Whether, within ``wait`` s, the graph shows two nodes named ``full`` for GRAPH_GRACE s on end.

    ExternalShutdownException when the node's context is shut down meanwhile (a launcher stopping a node
    that is still starting): run_nodes then exits quietly instead of with rclpy's 'context is invalid'."""
    deadline, since = time.monotonic() + wait, None
    while True:
        try:
            names = [ns.rstrip("/") + "/" + n for n, ns in node.get_node_names_and_namespaces()]
        except Exception:
            if node.context.ok():
                raise
            raise ExternalShutdownException() from None
        now = time.monotonic()
        since = (since or now) if names.count(full) > 1 else None
        if since is not None and now - since >= GRAPH_GRACE:
            return True
        if since is None and now >= deadline:
            return False
        time.sleep(0.05)


def run_nodes(factories: Sequence[Callable[[], Node]], args: list[str] | None = None) -> int:
    """Initialise rclpy, build the nodes, spin them on one executor thread, shut down cleanly.

    Returns a process exit status; a configuration error is printed as one line, not a traceback.
    """
    if os.environ.get("TEACHBOT_LOOPBACK", "1") != "0":
        configure_loopback(reserve_domain=False)
    sys.setswitchinterval(0.001)  # see teachbot.nodes.stack: threads wait less for the GIL
    configure_tracing(Path(sys.argv[0]).name or "teachbot")  # the spans of this process's nodes (config/tracing.yaml)
    rclpy.init(args=args)
    nodes: list[Node] = []
    status = 0
    try:
        for factory in factories:
            nodes.append(factory())
        executor = SingleThreadedExecutor()  # long work runs on the nodes' own worker threads
        for node in nodes:
            executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # noqa: BLE001 - a node that cannot start says why in one line
        if isinstance(exc, (TeachbotError, DuplicateNodeError)):
            print(f"error: {exc}", file=sys.stderr)
            status = 2
        elif rclpy.ok():
            raise
        # else SIGTERM or SIGINT shut the context down while the executor was between two waits: rclpy then raises
        # RCLError('context is not valid') rather than ExternalShutdownException. That is a stop, not a crash.
    finally:
        for node in nodes:
            close = getattr(node, "close", None)
            if close:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return status


Handler = Callable[[Any, Any], Any]
Describe = Callable[[Any, Any], dict[str, Any]]


def traced(node: Node, name: str, handler: Handler, describe: Describe | None = None) -> Handler:
    """``handler`` of a service as a span ``name`` of the caller's trace (the request's ``trace_parent``), made by
    ``node``; ``describe(request, response)`` adds the attributes that tell what was answered. A response with
    ``success`` False marks the span failed with its ``message``."""

    def serve(request: Any, response: Any) -> Any:
        with span(name, parent=getattr(request, "trace_parent", ""), node=node.get_name(), kind=SpanKind.SERVER) as current:
            answered = handler(request, response)
            if describe is not None:
                set_attributes(current, describe(request, answered))
            if getattr(answered, "success", True) is False:
                fail(current, str(getattr(answered, "message", "")))
            return answered

    return serve
