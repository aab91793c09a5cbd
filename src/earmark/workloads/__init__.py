"""Workloads run against a sidecar: the Concurrency Lab and the load command."""
