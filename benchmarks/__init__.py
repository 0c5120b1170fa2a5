"""Benchmarks that print figures next to a peer measured in the same run (README)."""
