"""The benchmark suites: ``python -m benchmarks --list``, ``python -m benchmarks SUITE [options]`` (README.md)."""
