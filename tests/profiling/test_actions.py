"""The scopes StreamProfiler gives Lightning's actions: a shared no-op scope for an action that no hook handles outside
a window, a plain scope object for the others and for every action inside a window, which records it and hands an
exception leaving it to the profiler first. What the hooks cost is measured by ``benchmarks/hook_cost.py``
(``tests/test_hook_cost_benchmark.py``)."""

import contextlib

import lightning as L
import pytest
from helpers import fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.profiling.actions import ActionScope, QuietActions
from lightning_streamprof.report.cost import cost_sentence
from lightning_streamprof.results import ProfilingCost


def test_an_action_no_hook_handles_gets_a_shared_no_op_scope_outside_windows(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=10**9)
    seen = []
    fit(prof, tmp_path, max_steps=3, callbacks=[_Probe(seen)])
    quiet, loop = seen[0]
    assert isinstance(quiet, contextlib.nullcontext) and quiet is prof.profile("[Callback]_Probe.on_train_batch_start")
    assert isinstance(loop, ActionScope)
    with quiet as name:
        assert name == "[Callback]_Probe.on_train_batch_start"  # as Lightning's scope yields the action's name


def test_the_step_s_action_and_the_loop_s_actions_are_handled_and_the_others_quiet():
    quiet = QuietActions(".train_dataloader_next")
    for action in ("[_TrainingEpochLoop].train_dataloader_next", "run_training_batch", "save_checkpoint",
                   "[Callback]X.on_train_batch_start", "[LightningModule]M.optimizer_step"):
        quiet.learn(action)
    assert set(quiet.scopes) == {"[Callback]X.on_train_batch_start", "[LightningModule]M.optimizer_step"}
    scope = quiet.scopes["[Callback]X.on_train_batch_start"]
    quiet.learn("[Callback]X.on_train_batch_start")
    assert quiet.scopes["[Callback]X.on_train_batch_start"] is scope  # learnt once: the same scope every step


def test_inside_a_window_every_action_gets_a_scope_that_records_it_and_sees_exceptions(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=None)
    calls = []
    fit(prof, tmp_path, max_steps=1)
    prof._profiled = _Watching(calls)
    scope = prof.profile("[Callback]X.on_train_batch_start")
    assert isinstance(scope, ActionScope)
    with pytest.raises(KeyboardInterrupt), scope:
        raise KeyboardInterrupt
    assert calls == [("start", "[Callback]X.on_train_batch_start"), ("exception", "KeyboardInterrupt"),
                     ("stop", "[Callback]X.on_train_batch_start")]


def test_the_cost_sentence_says_nothing_of_the_hooks():
    assert "hooks" not in cost_sentence(ProfilingCost(seconds=0.2, training_seconds=20.0, windows=1))


class _Watching:
    """A stage inside a window, whose action was known quiet outside it; it keeps the hooks' calls."""

    in_window = True

    def __init__(self, calls):
        self.quiet = QuietActions(".train_dataloader_next")
        self.quiet.learn("[Callback]X.on_train_batch_start")
        self.recorder = type("Recorder", (), {"watching": True})()
        self.start = lambda action: calls.append(("start", action))
        self.stop = lambda action: calls.append(("stop", action))
        self.failed = lambda err: calls.append(("exception", type(err).__name__))


class _Probe(L.Callback):
    """Keeps the profiler's scopes of a quiet action and of a loop action, once."""

    def __init__(self, seen):
        self.seen = seen

    def on_train_batch_start(self, trainer, *args):
        if not self.seen:
            profiler = trainer.profiler
            self.seen.append((profiler.profile("[Callback]_Probe.on_train_batch_start"),
                              profiler.profile("run_training_batch")))
