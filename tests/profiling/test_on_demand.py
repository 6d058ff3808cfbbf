"""A running job is asked for a window by a marker (local or an fsspec store) or a signal: the window starts within 2
steps of the request being seen, within the poll period of the marker being written, and says it was recorded on
request; the signal's earlier handler comes back; ``streamprof record`` writes the marker."""

import os
import signal
import threading

import fsspec
import lightning as L
import pytest
from helpers import Paced, fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.api import analyze_runs
from lightning_streamprof.cli import main
from lightning_streamprof.names import REQUEST_FILE
from lightning_streamprof.profiling.on_demand import POLL_STEPS, Requests, write_marker
from lightning_streamprof.results.triggers import REQUEST

ASK_AT = 150
WARMUP = 1


class AskAt(L.Callback):
    """At batch ``step``: ``ask()``."""

    def __init__(self, step, ask):
        self.step, self.ask = step, ask

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            self.ask()


def profiler(dirpath, **kwargs):
    """No scheduled window (a request waits for an earlier window's export, which a loaded machine makes long)."""
    return StreamProfiler(dirpath=dirpath, skip_first=10_000, warmup=WARMUP, active=2, every=0, max_overhead=None,
                          slowdown=False, request_poll=0.05, **kwargs)


def requested(prof):
    triggers = prof._profiled.recorder.triggers
    return [(w, triggers[w.window]) for w in prof.windows if w.window in triggers]


def test_the_signal_starts_a_window_within_two_steps_and_the_default_comes_back(tmp_path):
    before = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        prof = profiler(tmp_path / "t")
        fit(prof, tmp_path, max_steps=ASK_AT + 20, callbacks=[AskAt(ASK_AT, lambda: os.kill(os.getpid(),
                                                                                           signal.SIGUSR2))])
        ((window, trigger),) = requested(prof)
        assert (trigger.reason, trigger.via) == (REQUEST, "signal")
        assert ASK_AT <= trigger.step <= ASK_AT + 2
        assert window.first_step == trigger.step + WARMUP
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN  # what was there before the fit
        assert f"window {window.window} was recorded on request (by signal, seen at step {trigger.step:,})" in \
            prof.summary()
        with open(prof.report_path, encoding="utf-8") as f:
            assert "was recorded on request" in f.read()
        (run,) = analyze_runs([prof._profiled.reporter.run_dir])  # post hoc, from the trace's metadata
        assert {w.window: w.ranks[0].traces[0].trigger for w in run.windows} == {window.window: trigger}
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_a_local_marker_starts_a_window_within_the_poll_period(tmp_path):
    base = tmp_path / "t"
    prof = profiler(base)
    fit(prof, tmp_path, max_steps=ASK_AT + 2 * POLL_STEPS + 20, callbacks=[Paced(0.002),
                                                                       AskAt(ASK_AT, lambda: write_marker(str(base)))])
    ((window, trigger),) = requested(prof)
    assert trigger.via == "marker"
    assert ASK_AT < trigger.step <= ASK_AT + POLL_STEPS + 5  # found at the first poll after it was written
    assert window.first_step == trigger.step + WARMUP
    assert not os.path.exists(base / REQUEST_FILE)  # taken
    assert not prof._profiled.off.requests._thread.is_alive()  # the poll thread ended with the fit


def test_a_marker_in_the_run_directory_on_a_memory_store(tmp_path):
    base = "memory://streamprof-on-demand/t"
    prof = profiler(base)

    def ask():
        write_marker(prof._profiled.reporter.run_dir)

    fit(prof, tmp_path, max_steps=ASK_AT + 2 * POLL_STEPS + 20, callbacks=[Paced(0.002), AskAt(ASK_AT, ask)])
    ((window, trigger),) = requested(prof)
    assert trigger.via == "marker" and ASK_AT < trigger.step <= ASK_AT + POLL_STEPS + 5
    fs = fsspec.filesystem("memory")
    assert not fs.exists(prof._profiled.reporter.run_dir.replace("memory://", "/") + "/" + REQUEST_FILE)


def test_a_handler_of_the_program_is_left_alone_and_says_so(tmp_path):
    seen = []
    mine = signal.signal(signal.SIGUSR2, lambda *a: seen.append(a))
    try:
        handler = signal.getsignal(signal.SIGUSR2)
        prof = profiler(tmp_path / "t")
        fit(prof, tmp_path, max_steps=ASK_AT + 20, callbacks=[AskAt(ASK_AT, lambda: os.kill(os.getpid(),
                                                                                           signal.SIGUSR2))])
        assert requested(prof) == [] and len(seen) == 1 and signal.getsignal(signal.SIGUSR2) is handler
        assert ("StreamProfiler: SIGUSR2 does not ask for a window: the program handles it already, and its handler "
                "is left alone; the marker file still does") in prof.summary().splitlines()
    finally:
        signal.signal(signal.SIGUSR2, mine)


def test_no_requests_when_turned_off(tmp_path):
    base = tmp_path / "t"
    prof = StreamProfiler(dirpath=base, skip_first=5, warmup=1, active=2, every=0, max_overhead=None,
                          on_request=False, request_poll=0.05)
    previous = signal.getsignal(signal.SIGUSR2)
    fit(prof, tmp_path, max_steps=ASK_AT + 120, callbacks=[AskAt(ASK_AT, lambda: write_marker(str(base)))])
    assert requested(prof) == [] and os.path.exists(base / REQUEST_FILE)
    assert signal.getsignal(signal.SIGUSR2) is previous


def test_off_the_main_thread_the_signal_is_not_handled_and_says_so(tmp_path):
    made = []
    thread = threading.Thread(target=lambda: made.append(Requests([], signal.SIGUSR2, lambda: 0)))
    thread.start()
    thread.join()
    (requests,) = made
    assert "SIGUSR2 does not ask for a window: the profiler was set up off the main thread" in requests.note
    requests.close()


def test_the_poll_waits_for_both_the_steps_and_the_seconds(tmp_path):
    steps = {"n": 0}
    write_marker(str(tmp_path))
    requests = Requests([str(tmp_path / REQUEST_FILE)], None, lambda: steps["n"], poll_seconds=0.01)
    try:
        threading.Event().wait(0.1)
        assert requests.pending is None  # seconds passed, steps did not
        steps["n"] = POLL_STEPS
        for _ in range(100):
            if requests.pending:
                break
            threading.Event().wait(0.01)
        assert requests.pending == "marker" and not (tmp_path / REQUEST_FILE).exists()
        assert requests.take(7).step == 7 and requests.pending == "marker"
        requests.done()
        assert requests.pending is None
    finally:
        requests.close()


def test_streamprof_record_writes_the_marker_and_refuses_a_missing_directory(tmp_path, capsys):
    assert main(["record", str(tmp_path)]) == 0
    assert (tmp_path / REQUEST_FILE).exists()
    assert f"Wrote {tmp_path / REQUEST_FILE}" in capsys.readouterr().out
    assert main(["record", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, error, text", [
    ({"request_signal": "SIGUSR1"}, ValueError, "`request_signal` must be a signal's name or number (not SIGUSR1"),
    ({"request_signal": "NOSUCH"}, ValueError, "`request_signal` must be a signal's name or number"),
    ({"request_signal": 2.5}, TypeError, "`request_signal` must be a signal's name or number"),
    ({"request_poll": 0}, ValueError, "`request_poll` must be a number > 0, got 0 (int)"),
    ({"on_request": "yes"}, TypeError, "`on_request` must be True or False, got 'yes' (str)"),
])
def test_bad_request_settings_are_refused_in_one_line(kwargs, error, text):
    with pytest.raises(error) as info:
        StreamProfiler(**kwargs)
    assert str(info.value).startswith(f"StreamProfiler: {text}")
