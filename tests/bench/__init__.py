"""Benchmarks that print numbers (run as modules: `python -m tests.bench.docs_quality`); not part of the test suite."""
