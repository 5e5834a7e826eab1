"""teachbot: an LLM-orchestrated ROS 2 robot stack that learns from natural-language corrections."""

__version__ = "0.1.0"
