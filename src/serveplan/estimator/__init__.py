"""Estimator: operator roofline, dispatch overlap, communication and memory of one step."""
