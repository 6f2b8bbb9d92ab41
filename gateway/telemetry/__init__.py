"""Telemetry: metrics, traces, where a request ends, the autoscaling signal."""
