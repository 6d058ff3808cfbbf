"""A training run that fails inside a profiling window, for the fault tests that need a process of their own.

``python fault_program.py MODE DIR``: MODE is ``exception`` (the user's RuntimeError escapes ``fit``),
``interrupt`` (Ctrl+C inside a window), ``del`` (an exception, then trainer and profiler freed) or ``second``
(an exception, then a second ``fit`` with a new profiler); ``none`` in place of ``DIR`` runs without the
profiler. The last line printed is a JSON object of what happened.
"""

import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers import TinyModel, fit  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402

FAIL_AT = 14  # inside the second window (steps 13..16)


class Failing(TinyModel):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def training_step(self, batch, batch_idx):
        if self.global_step == FAIL_AT:
            raise self.error
        return super().training_step(batch, batch_idx)


def profiler(directory):
    if directory == "none":
        return None
    return StreamProfiler(dirpath=directory, skip_first=2, warmup=1, active=4, every=10, max_overhead=None)


def main(mode, directory):
    out = {}
    prof = profiler(directory)
    error = KeyboardInterrupt() if mode == "interrupt" else RuntimeError("the user's bug")
    try:
        trainer = fit(prof, directory if directory != "none" else os.getcwd(), max_steps=30, model=Failing(error))
    except RuntimeError as err:
        out["raised"] = repr(err)
    if mode == "del":
        start = time.perf_counter()
        del prof
        gc.collect()
        out["free_s"] = time.perf_counter() - start
    if mode == "second":
        second = profiler(os.path.join(directory, "second"))
        trainer = fit(second, directory, max_steps=30)
        out["second_steps"] = trainer.global_step
        out["second_windows"] = len(second.windows)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
