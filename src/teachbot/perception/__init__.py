"""Perception: open-vocabulary detection, 3D localisation and the scene model (no ROS here)."""
