"""Measurements of safeact, run as modules: ``python -m bench.<name>``."""
