"""The emergency stop as the console sees it: while it is engaged, robot calls are refused before a goal is sent.

The interaction manager feeds :meth:`EmergencyStop.update` from the stop topic (std_msgs/Bool, the robot
profile's ``topics.emergency_stop``; ``teachbot chat`` sends it with /stop and /resume) and calls
:meth:`EmergencyStop.check` before each skill goal. The skills node obeys the same topic on its own; this layer makes
the console's error line say how to release the stop. Wording: prompts/safety.yaml. ROS-free.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, EmergencyStopError
from teachbot.paths import share_dir

WORDING = "safety.yaml"  # prompts/<this>: the approval gate's and the emergency stop's texts


def safety_texts(section: str, needed: tuple[str, ...]) -> dict[str, str]:
    """The texts ``needed`` of one section of prompts/safety.yaml; a ConfigError naming the file and section."""
    path = share_dir() / "prompts" / WORDING
    texts = load_yaml(path).get(section)
    if not isinstance(texts, Mapping) or any(not isinstance(texts.get(k), str) for k in needed):
        raise ConfigError(f"{path}: {section}: needs the texts {', '.join(needed)}")
    return {k: texts[k] for k in needed}


class EmergencyStop:
    """Whether the stop on ``topic`` is engaged; thread-safe (a topic callback sets it, the console reads it)."""

    def __init__(self, topic: str, wording: Mapping[str, str] | None = None) -> None:
        self.topic = topic
        self.wording = dict(wording) if wording is not None else safety_texts("emergency_stop", ("said", "refused"))
        self._engaged = threading.Event()
        self._lock = threading.Lock()

    @property
    def engaged(self) -> bool:
        return self._engaged.is_set()

    @property
    def announcement(self) -> str:
        """What the robot says once when the stop engages."""
        return self.wording["said"]

    def update(self, engaged: bool) -> bool:
        """Set the stop from one message; True only when this engages a released stop (act on it once)."""
        with self._lock:
            was = self._engaged.is_set()
            if engaged:
                self._engaged.set()
            else:
                self._engaged.clear()
        return engaged and not was

    def check(self, skill: str) -> None:
        """Raise EmergencyStopError (how to release it included) while the stop is engaged."""
        if self._engaged.is_set():
            raise EmergencyStopError(self.wording["refused"].format(skill=skill, topic=self.topic))
