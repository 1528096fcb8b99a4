"""Benchmarks of ascend-preflight against simulated nodes (not part of the test suite)."""
