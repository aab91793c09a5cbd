"""Earmark: a gRPC sidecar that turns a usage-limit check into a promise."""

__version__ = "0.1.0"
