"""A single-process StreamProfiler trace carries ``"rank": 0`` with a space: Holistic Trace Analysis finds a
trace's rank with the pattern ``"rank":\\s+(\\d+)`` (orjson writes no space)."""

import os
import re

from lightning_streamprof.profiling.session import KinetoSession

HTA_RANK = re.compile(r'"rank":\s+(\d+)')


def test_distributed_info_rank_has_the_space_hta_reads():
    session = KinetoSession(["cpu"], record_shapes=False, profile_memory=False, with_stack=False, with_flops=False,
                            all_threads=False)
    session.start({"streamprof": {"run": "r", "window": 0}}, rank=3, world_size=4)
    path = session.save()
    with open(path) as f:
        text = f.read()
    os.remove(path)
    first = next(m for m in map(HTA_RANK.search, text.splitlines()) if m)
    assert first.group(1) == "3"
