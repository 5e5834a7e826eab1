"""The interaction core without ROS: episodes of the console, the learning call, the examples source.

``InteractionCore`` runs console episodes one after another; the interaction manager node only
translates its callbacks into topics and its ``LearningCall``/example source into service calls. Issue
checks, distilled knowledge and task memory plug into this core.
"""

from __future__ import annotations

from teachbot.interaction.core import CoreConfig, InteractionCore
from teachbot.interaction.examples import FallbackExamples, LocalExamples, MemoryUnavailable, render_example
from teachbot.learning.call import LearningCall, LearnReply, LearnRequest

__all__ = [
    "CoreConfig",
    "FallbackExamples",
    "InteractionCore",
    "LearnReply",
    "LearnRequest",
    "LearningCall",
    "LocalExamples",
    "MemoryUnavailable",
    "render_example",
]
