"""Engines: the ``Engine`` protocol, its implementations, and pools of replicas."""
