"""A short fuzz run (the long one: ``benchmarks/fuzz_traces.py``): generated and mutated traces raise nothing but
TraceFormatError, and every clean result keeps the invariants."""

import time

from hypothesis import HealthCheck, given, settings
from target import counting, run_target, trace_bytes

COUNTS: dict[str, int] = {}
SLOWEST = [0.0]


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(trace_bytes())
def _fuzz(data):
    start = time.perf_counter()
    counting(run_target, COUNTS)(data)
    SLOWEST[0] = max(SLOWEST[0], time.perf_counter() - start)


def test_fuzz_short_run():
    _fuzz()
    assert sum(COUNTS.values()) >= 300
    assert COUNTS.get("clean", 0) >= 50 and COUNTS.get("rejected", 0) >= 50  # both sides are exercised
    assert SLOWEST[0] < 10  # no hang
