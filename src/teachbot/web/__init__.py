"""The person's web page (``teachbot web``): talk to the robot, see what it sees and does, confirm what it learns.

The ROS-free parts (config, protocol checks, transcript highlighting, lessons, camera frames, episode traces, the Starlette app
and its uvicorn server) know nothing of ROS; :mod:`teachbot.nodes.web_node` is the thin rclpy bridge that feeds them.
"""
