"""Helpers the tests share: driving the alert API, nginx in front of service processes, the
browser tests' polling interval. The benchmarks reuse the last two; tests import nothing from
``benchmarks/``."""
