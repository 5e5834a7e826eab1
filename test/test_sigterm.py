"""SIGTERM stops a busy stack (issue 31, item 11).

``teachbot sim --console`` with a task running (a scripted model's loop putting the blocks in the bowls, one
``put_first_on_second`` after another) used to print "stopping ..." on SIGTERM and go on for minutes: closing the
interaction manager waited for the sandbox, which waited for the running statement, which waited for a skill
whose result could no longer arrive. Now the skills node halts first (the running goal cancelled, the arm held,
later commands refused) and the process ends within 5 s (scaled for the machine, test/timing.py), every node
closed ("stopped" is printed after the last close, the memory node's store among them).

``docker stop``, systemd and ``ros2 launch`` stop with SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from timing import deadline, pytest_timeout, timeout

from teachbot.paths import config_path

TEACHBOT = Path(sys.executable).parent / "teachbot"
STOPPED_WITHIN = 5.0  # seconds from SIGTERM to the process's end: the property (scaled, see the module docstring)
LOOP = ("for i in range(30):\n"
        "...     for b in [n for n in get_obj_names() if 'block' in n]:\n"
        "...         put_first_on_second(b, [n for n in get_obj_names() if 'bowl' in n][i % 2])\n"
        "... \n")
REQUEST = "put the blocks in the bowls"

pytestmark = pytest.mark.timeout(pytest_timeout(300))


def scripted_llm_config(path: Path) -> Path:
    """config/llm.yaml with every role scripted: the robot's first statement is the long loop, then it waits."""
    raw = yaml.safe_load(config_path("llm.yaml").read_text(encoding="utf-8"))
    raw["llm"]["defaults"].update(backend="scripted", completions=[LOOP, "wait_for_trigger()", "wait_for_trigger()"])
    for role in raw["llm"]["roles"].values():
        if isinstance(role, dict) and "backend" in role:
            role["backend"] = "scripted"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


class Lines:
    """A child's stdout, read on a thread: every line kept, waited for by predicate."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, predicate, seconds: float, what: str) -> str:
        until = deadline(seconds)
        with self._changed:
            while True:
                found = next((line for line in self.lines if predicate(line)), None)
                if found is not None:
                    return found
                assert time.monotonic() < until, f"no {what} within {timeout(seconds):.0f} s: {self.lines[-20:]}"
                self._changed.wait(0.2)


def test_sigterm_stops_a_stack_that_is_running_a_task(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # it reserves its own domain
    errors = open(tmp_path / "sim.err", "w+")  # noqa: SIM115 - read back at the end
    sim = subprocess.Popen(
        [str(TEACHBOT), "sim", "--seed", "3", "--console", "--no-camera", "--llm-config",
         str(scripted_llm_config(tmp_path / "llm.yaml")), "--memory", str(tmp_path / "learned")],
        stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
    chat: subprocess.Popen[str] | None = None
    try:
        out = Lines(sim.stdout)
        ready = out.wait_for(lambda line: "ROS_DOMAIN_ID=" in line, 180, "ready line")
        domain = re.search(r"ROS_DOMAIN_ID=(\d+)", ready).group(1)
        chat = subprocess.Popen([str(TEACHBOT), "chat", "--domain-id", domain], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        transcript = Lines(chat.stdout)
        until = deadline(90)
        while not any(line.startswith(">>> for i in range(30):") for line in transcript.lines):
            assert time.monotonic() < until, f"the task did not start: {transcript.lines[-20:]}"
            chat.stdin.write(REQUEST + "\n")  # until the console has heard it (the first may go before discovery)
            chat.stdin.flush()
            time.sleep(2.0)
        time.sleep(4.0)  # well into the loop: a skill is running
        sim.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            sim.wait(timeout=timeout(STOPPED_WITHIN))
        except subprocess.TimeoutExpired:
            pytest.fail(f"teachbot sim still ran {timeout(STOPPED_WITHIN):.0f} s after SIGTERM, with a task running: "
                        f"{out.lines[-5:]}")
        took = time.monotonic() - sent
    finally:
        for process in (sim, chat):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    errors.seek(0)
    log = errors.read()
    print(f"stopped {took:.2f} s after SIGTERM")
    assert sim.returncode == 0, log[-5000:]
    time.sleep(0.2)  # the reader thread's last lines
    assert out.lines[-2:] == ["stopping ...", "stopped"], out.lines[-10:]  # "stopped": every node was closed
    assert re.search(r"the robot stack is stopping: holding the arm and cancelling the running '\w+' goal", log), log[-5000:]
    assert "Traceback" not in log, log[-5000:]
