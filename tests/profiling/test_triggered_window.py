"""A run that slows down records a window at once, and the window explains itself against the last normal one: in the
summary, the HTML report, the trace's metadata read post hoc and ``streamprof compare`` on the run alone."""

import time

import lightning as L
import pytest
from helpers import Paced, TinyModel, fit
from lightning.pytorch.demos.boring_classes import RandomDataset
from torch.utils.data import DataLoader

from lightning_streamprof import StreamProfiler
from lightning_streamprof.api import analyze_runs
from lightning_streamprof.results.triggers import REFERENCE, SLOWDOWN, explanations

SLOW_FROM = 200  # the loader sleeps from this batch on
SLEEP = 0.012


class SlowingData(RandomDataset):
    """Each item from batch ``SLOW_FROM`` on takes ``SLEEP`` seconds more to load."""

    def __getitem__(self, index):
        if index >= SLOW_FROM:
            time.sleep(SLEEP)
        return super().__getitem__(index)


class SlowingLoader(TinyModel):
    def train_dataloader(self):
        return DataLoader(SlowingData(32, 4000), batch_size=1)


@pytest.fixture(scope="module")
def slowed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slowed")
    prof = StreamProfiler(dirpath=tmp / "t", skip_first=5, warmup=1, active=3, every=0, max_overhead=None)
    trainer = fit(prof, tmp, max_steps=SLOW_FROM + 150, model=SlowingLoader(), callbacks=[Paced(0.006)])
    return prof, trainer, tmp


def test_a_slowdown_records_a_window_soon_after_it_starts(slowed):
    prof, _, _ = slowed
    stage = prof._profiled
    slow = [w for w in prof.windows if w.window in stage.recorder.triggers]
    assert 1 <= len(slow) <= 2  # the run stays slow: no window more, unless the shared machine slowed it further
    assert SLOW_FROM < slow[0].first_step <= SLOW_FROM + 100
    trigger = stage.recorder.triggers[slow[0].window]
    assert trigger.reason == SLOWDOWN
    assert abs(trigger.step - SLOW_FROM) <= 20  # where the steps' noise lets the watch say it started
    assert trigger.recent_ms > 1.25 * trigger.baseline_ms
    assert prof.windows[0].window == 0 and 0 not in stage.recorder.triggers  # the scheduled window was normal


def test_the_window_names_the_dataloader_and_its_growth(slowed):
    prof, _, _ = slowed
    explained = prof._profiled.off.explained[min(prof._profiled.off.explained)]
    assert explained.normal_window == 0
    assert explained.grown.name == "dataloader"
    assert explained.grown.delta == pytest.approx(SLEEP * 1e3, rel=0.35)
    text = prof.summary()
    assert f"was recorded because the step time rose from {explained.trigger.baseline_ms:.1f} to" in text
    assert f"from step {explained.trigger.step:,}" in text
    assert "dataloader grew most, by" in text
    assert "Step breakdown (ms per step)" in text


def test_the_html_report_explains_the_slow_window(slowed):
    prof, _, _ = slowed
    with open(prof.report_path, encoding="utf-8") as f:
        html = f.read()
    assert "Windows off the schedule" in html
    assert "was recorded because the step time rose from" in html
    assert "dataloader grew most" in html


def test_the_trigger_survives_the_trace_metadata_and_the_comparison_is_found_post_hoc(slowed):
    prof, _, _ = slowed
    run_dir = prof._profiled.reporter.run_dir
    (run,) = analyze_runs([run_dir])
    triggers = {w.window: w.ranks[0].traces[0].trigger for w in run.windows}
    assert triggers[0] is None
    slow = [w for w, t in triggers.items() if t is not None and t.reason == SLOWDOWN]
    assert slow and triggers[slow[0]] == prof._profiled.recorder.triggers[slow[0]]
    found = explanations(run.windows)
    assert found == [prof._profiled.off.explained[w] for w in sorted(prof._profiled.off.explained)]


def test_streamprof_compare_on_the_run_alone_compares_the_slow_window_with_the_normal_one(slowed, capsys):
    from lightning_streamprof.cli import main

    prof, _, _ = slowed
    html = slowed[2] / "compare.html"
    assert main(["compare", prof._profiled.reporter.run_dir, "-o", str(html)]) == 0
    out = capsys.readouterr().out
    assert "was recorded because the step time rose from" in out
    assert "dataloader grew most" in out
    assert "Step breakdown (ms per step)" in out and "window 0 (normal)" in out
    page = html.read_text(encoding="utf-8")
    assert "dataloader grew most" in page and "<table" in page


def test_streamprof_compare_on_a_run_without_a_slowdown_says_so_in_one_line(tmp_path, capsys):
    from lightning_streamprof.cli import main

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=0, slowdown=False)
    fit(prof, tmp_path, max_steps=8)
    assert main(["compare", prof._profiled.reporter.run_dir]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no window of the run was recorded for a slowdown" in err[0]


def test_a_reference_window_is_recorded_when_the_schedule_gave_none(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=5000, warmup=1, active=2, every=0, max_overhead=None)
    fit(prof, tmp_path, max_steps=SLOW_FROM + 150, model=SlowingLoader(), callbacks=[Paced(0.006)])
    triggers = prof._profiled.recorder.triggers
    reasons = [triggers[w.window].reason for w in prof.windows]
    assert reasons[:2] == [REFERENCE, SLOWDOWN]
    explained = prof._profiled.off.explained[prof.windows[1].window]
    assert explained.normal_window == prof.windows[0].window and explained.grown.name == "dataloader"


def test_no_watch_no_window_off_the_schedule(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=5, warmup=1, active=2, every=0, max_overhead=None,
                          slowdown=False)
    fit(prof, tmp_path, max_steps=SLOW_FROM + 100, model=SlowingLoader(), callbacks=[Paced(0.006)])
    assert len(prof.windows) == 1 and prof._profiled.recorder.triggers == {}


class SlowValidation(TinyModel):
    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4000), batch_size=1)

    def validation_step(self, batch, batch_idx):
        time.sleep(0.03)
        return super().validation_step(batch, batch_idx)


def test_steps_with_validation_in_them_are_left_out(tmp_path):
    # every other step runs a validation of 30 ms: counted, they would make half the steps slow (a slowdown), and
    # each a stall
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=5, warmup=1, active=2, every=0, max_overhead=None)
    fit(prof, tmp_path, max_steps=260, model=SlowValidation(), callbacks=[Paced(0.002)], val_check_interval=2,
        limit_val_batches=1, num_sanity_val_steps=0)
    watch = prof._profiled.off.watch
    assert watch.baseline is not None and watch.baseline < 0.01  # it watched the training steps alone
    assert watch.stalls == [] and watch.triggers == []


class _OneStall(L.Callback):
    """Step 400 takes 0.5 s more: a single stall, not a slowdown."""

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 400:
            time.sleep(0.5)


def test_a_single_stall_is_listed_in_the_summary_and_the_report(tmp_path):
    """Paced steps of about 6 ms, so that the first window's export is over long before the stall."""
    prof = StreamProfiler(dirpath=str(tmp_path / "traces"), skip_first=4, warmup=1, active=2, every=0,
                          max_overhead=None)
    fit(prof, tmp_path, max_steps=460, callbacks=[Paced(0.006), _OneStall()])
    assert "Stalls (single steps of at least 10x the median step): 1" in prof.summary()
    report = (next((tmp_path / "traces").glob("fit-*")) / "report.html").read_text()
    assert "Stalls (single steps of at least 10x the median step): 1" in report
