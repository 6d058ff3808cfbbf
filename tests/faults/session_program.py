"""Programs whose Kineto sessions meet ours, each in a process of its own (a clash used to kill the process with a
segmentation fault).

``python session_program.py MODE DIR``: MODE is ``user`` (a ``torch.profiler.profile`` of the program's own around
``fit``, exported afterwards) or ``threads`` (two Trainers fitting at once in two threads, each with a
StreamProfiler). The last line printed is a JSON object of what happened.
"""

import json
import os
import sys
import threading
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers import TinyModel, fit  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402


def profiler(directory):
    return StreamProfiler(dirpath=directory, skip_first=2, warmup=1, active=4, every=10, max_overhead=None)


def ours(caught):
    return [str(w.message) for w in caught if str(w.message).startswith("StreamProfiler")]


def user_session(directory):
    import torch

    prof = profiler(os.path.join(directory, "traces"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as theirs:
            with torch.profiler.record_function("the user's own range"):
                fit(prof, directory)
    path = os.path.join(directory, "user.pt.trace.json")
    theirs.export_chrome_trace(path)
    with open(path) as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    return {"warnings": ours(caught), "windows": len(prof.windows), "user_range": "the user's own range" in names,
            "our_steps_in_user_trace": any(str(n).startswith("ProfilerStep#") for n in names)}


def two_threads(directory):
    profs = [profiler(os.path.join(directory, f"t{i}")) for i in range(2)]
    errors = []
    start = threading.Barrier(2)

    def train(i):
        try:
            start.wait()
            fit(profs[i], os.path.join(directory, f"root{i}"), max_steps=60)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(repr(err))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return {"errors": errors, "warnings": ours(caught), "windows": [len(p.windows) for p in profs],
            "paths": [w.path for p in profs for w in p.windows]}


if __name__ == "__main__":
    mode, directory = sys.argv[1], sys.argv[2]
    out = user_session(directory) if mode == "user" else two_threads(directory)
    print(json.dumps(out), flush=True)
