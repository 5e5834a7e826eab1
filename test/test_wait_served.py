"""wait_served (teachbot.nodes.common): how the skill client, the issue-detection client and the interaction manager
wait for a server's answer. A slow server that stays on the graph gets the whole timeout (a loaded machine); one
that leaves the graph ends the wait at its next poll, also when it was ready only as the wait began."""

from __future__ import annotations

import threading
import time

from teachbot.nodes.common import DONE, GONE, STOPPED, TIMEOUT, wait_served


class Pending:
    """A future that a test completes (rclpy's add_done_callback and done)."""

    def __init__(self) -> None:
        self._done = False
        self._callbacks: list = []

    def add_done_callback(self, callback) -> None:
        self._callbacks.append(callback)

    def done(self) -> bool:
        return self._done

    def complete(self) -> None:
        self._done = True
        for callback in self._callbacks:
            callback(self)


def test_a_server_that_was_ready_when_the_wait_began_and_left_is_gone_at_the_next_poll():
    served = iter([True])  # ready when the wait begins, gone at every poll after
    started = time.monotonic()
    assert wait_served(Pending(), 30.0, lambda: next(served, False), poll=0.05) == GONE
    assert time.monotonic() - started < 10.0  # a poll or two, not the 30 s timeout (measured loosely: a busy machine)


def test_a_slow_server_on_the_graph_gets_the_whole_timeout_and_its_answer_ends_the_wait():
    future = Pending()
    threading.Timer(0.3, future.complete).start()
    assert wait_served(future, 30.0, lambda: True, poll=0.05) == DONE
    assert wait_served(Pending(), 0.3, lambda: True, poll=0.05) == TIMEOUT


def test_a_server_never_seen_is_waited_for_and_a_stop_ends_the_wait():
    assert wait_served(Pending(), 0.3, lambda: False, poll=0.05) == TIMEOUT  # not discovered yet: not taken for gone
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    assert wait_served(Pending(), 30.0, lambda: True, poll=0.05, stop=stop.is_set) == STOPPED
