"""Sessions on disk: the rosbag2 session format (MCAP or sqlite3) without ROS.

:mod:`.types` (the rosbags type store with teachbot_interfaces), :mod:`.bag` (writer, reader,
:class:`SessionSpec`), :mod:`.compare` (two sessions' transcripts and final worlds),
:mod:`.scripted_sessions`. Recording a running stack is :mod:`teachbot.nodes.session_recording`;
replaying a bag as a regression test is :mod:`teachbot.nodes.replay_check`; recorded completions as
the LLM are :mod:`teachbot.llm.replay_model`.
"""

from teachbot.recording.bag import BagError, RecordedSession, SessionSpec

__all__ = ["BagError", "RecordedSession", "SessionSpec"]
