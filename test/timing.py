"""How long the suite waits: every deadline a test sets (a wait for a node, an answer, a subprocess) comes from
here, scaled by one factor, so that no verdict depends on how fast or how busy the machine is.

``TEACHBOT_TEST_TIMEOUT_SCALE`` (default 1) multiplies every such wait; a slow or shared CI machine sets it
to 2 or 3. The seconds written at the call sites are already generous: a deadline only bounds how long a
failing test takes to say so, it never decides a passing one. What stays unscaled: poll periods
(``spin_once(timeout_sec=0.05)``), and bounds that are themselves the property under test (a fault
detected "within 2 s", measured on the wall because that is what the robot's user waits): those say so
where they are written.
"""

from __future__ import annotations

import os
import time

SCALE = float(os.environ.get("TEACHBOT_TEST_TIMEOUT_SCALE") or 1)
if SCALE <= 0:
    raise ValueError(f"TEACHBOT_TEST_TIMEOUT_SCALE must be a positive number, got {SCALE}")


def timeout(seconds: float) -> float:
    """``seconds`` scaled for this machine: use it for every wait that a loaded machine could make trip."""
    return seconds * SCALE


def deadline(seconds: float) -> float:
    """The ``time.monotonic()`` value ``timeout(seconds)`` from now."""
    return time.monotonic() + timeout(seconds)


def pytest_timeout(seconds: float) -> int:
    """A whole test's (or subprocess's) limit in whole seconds, for ``pytest.mark.timeout`` and ``subprocess.run``."""
    return int(round(timeout(seconds)))
