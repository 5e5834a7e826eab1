"""Detector backends; pick one with teachbot.perception.detector.make_detector."""
