"""The order a supervised stack stops in (teachbot sim --processes; issue 31, item 11): the nodes that move the
robot first, so the arm is halted before anything else goes, the memory (the stores) last.

Each node here is a stand-in process that, on SIGTERM, notes it, takes HALT seconds (a skills node halting its
arm, a memory node flushing its stores) and notes its exit. Supervisor.stop's real signalling and waiting run on
them; the verdict is the order of the notes, not a time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.nodes.nodeset import NodeSpec, node_set
from teachbot.nodes.supervisor import MOTION, STORES, Supervisor, stop_stages

pytestmark = pytest.mark.timeout(pytest_timeout(120))
HALT = 2.0  # seconds a stand-in takes to exit after SIGTERM: far more than signals sent at once are apart
READY = 60.0  # seconds a stand-in may take to start on a loaded machine (bounds a hang only)
NODES = ["sim", "skills", "perception", "memory", "issue_detection", "improvement", "interaction_manager", "web"]

STAND_IN = """
import os, signal, sys, time
name, log, halt = sys.argv[1], sys.argv[2], float(sys.argv[3])

def note(what):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, f"{name} {what}\\n".encode())
    os.close(fd)

def stop(*_):
    note("term")
    time.sleep(halt)
    note("exit")
    os._exit(0)

signal.signal(signal.SIGTERM, stop)
note("ready")
while True:
    time.sleep(1)
"""


def test_the_shipped_sim_stack_stops_motion_first_and_memory_last() -> None:
    names = [spec.name for spec in node_set("sim", {"web": True, "console": True})]
    stages = stop_stages(names)
    assert stages[0] == [n for n in names if n in MOTION] == ["skills", "interaction_manager"]
    assert stages[-1] == ["memory"]
    assert sorted(sum(stages, [])) == sorted(names) and len(stages) == 3


def test_stop_waits_for_the_arm_to_halt_before_the_rest_and_stores_last(tmp_path: Path) -> None:
    log = tmp_path / "order.log"
    supervisor = Supervisor([NodeSpec(name, name, f"stand_in:{name}") for name in NODES], log=lambda _line: None)
    for name, child in supervisor.children.items():
        child.process = subprocess.Popen([sys.executable, "-c", STAND_IN, name, str(log), str(HALT)])
    try:
        until = time.monotonic() + READY
        while not (log.is_file() and log.read_text().count(" ready") == len(NODES)):
            assert time.monotonic() < until, "the stand-ins did not start"
            time.sleep(0.05)
        supervisor.stop()
    finally:
        for child in supervisor.children.values():
            if child.process is not None and child.process.poll() is None:
                child.process.kill()
    notes = [line for line in log.read_text().splitlines() if not line.endswith(" ready")]
    print("\n".join(notes))
    at = {note: i for i, note in enumerate(notes)}
    assert len(at) == 2 * len(NODES), notes  # every node was told and exited, none killed
    rest = [n for n in NODES if n not in MOTION and n not in STORES]
    for moving in MOTION:
        for other in [*rest, *STORES]:
            assert at[f"{moving} exit"] < at[f"{other} term"], f"{other} was stopped before {moving} had halted"
    for other in [*MOTION, *rest]:
        for store in STORES:
            assert at[f"{other} exit"] < at[f"{store} term"], f"{store} was stopped before {other} had exited"
