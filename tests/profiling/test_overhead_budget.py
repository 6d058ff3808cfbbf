"""The overhead budget charges what the training run pays for profiling, and only that: a run of steps on a fake
clock with costs injected where the profiler causes them (its own time at a window's start and end, slower steps in
a window and while its export runs), a stall from elsewhere, and noise."""

import random

import pytest

from lightning_streamprof.profiling.problems import Problems
from lightning_streamprof.profiling.recorder import WindowRecorder
from lightning_streamprof.profiling.schedule import OverheadBudget, StepBaseline, WindowSchedule
from lightning_streamprof.profiling.session import KinetoSession
from lightning_streamprof.report.cost import cost_sentence
from lightning_streamprof.results import ProfilingCost

BASE = 0.100  # seconds per unprofiled step


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Costs:
    prepare = 0.010  # the profiler's own time, in the training thread
    start = 0.001
    save = 0.012
    window_step = 0.006  # each warm-up and recorded step is this much slower
    export_step = 0.002  # each step while the export runs is this much slower
    export_steps = 8  # steps the export of a window takes


class FakeSession(KinetoSession):
    """Kineto's session as the recorder sees it, costing the profiler's own time on the clock."""

    records_device = True

    def __init__(self, clock: Clock, costs: Costs) -> None:  # no Kineto
        self.clock, self.costs, self.recording = clock, costs, False
        clock.advance(costs.prepare)

    def start(self, metadata, rank, world_size) -> None:
        self.recording = True
        self.clock.advance(self.costs.start)

    def stop(self) -> str:
        self.recording = False
        self.clock.advance(self.costs.save)
        return "local.json"

    def release(self) -> None:
        self.recording = False


class FakeExporter:
    accepting, full, timeout = True, False, 60.0

    def __init__(self, costs: Costs) -> None:
        self.costs, self.submitted, self.left = costs, [], 0

    def submit(self, local, identity, *, steps, global_step=0, device_work=False) -> None:
        self.submitted.append(steps)
        self.left = self.costs.export_steps

    @property
    def busy(self) -> bool:
        return self.left > 0

    def wait_saved(self, timeout) -> bool:
        return True


def simulate(steps=600, costs=None, stall_at=None, stall=3.0, noise=None, max_overhead=0.02, seed=0):
    """Train ``steps`` steps; returns the recorder, the exporter and the seconds the profiler really cost."""
    costs = costs or Costs()
    clock = Clock()
    exporter = FakeExporter(costs)
    schedule = WindowSchedule(skip_first=20, warmup=2, active=3, every=7)  # every=None's grid
    recorder = WindowRecorder(schedule, OverheadBudget(max_overhead), exporter, lambda: FakeSession(clock, costs),
                              lambda: 0, run_name="run", run_dir="/nowhere", rank=0, world_size=1, clock=clock)
    rng = random.Random(seed)
    paid = 0.0
    for step in range(steps):
        before = clock.now
        recorder.step_boundary(lambda: 0)
        paid += clock.now - before  # the profiler's own time
        extra = 0.0
        if recorder.active:
            extra = costs.window_step
        elif exporter.busy:
            extra = costs.export_step
            exporter.left -= 1
        paid += extra
        clock.advance(BASE + extra + (noise(rng) if noise else 0.0) + (stall if step == stall_at else 0.0))
    return recorder, exporter, paid


def test_every_cost_of_the_run_is_charged():
    """The own time, the window's steps and all 8 steps of each export (not only 2) are charged: the stated cost
    is what the run paid, and it stays within the budget."""
    recorder, exporter, paid = simulate()
    budget = recorder.budget
    assert len(exporter.submitted) >= 10
    assert budget.total_cost == pytest.approx(paid, rel=0.02)
    assert budget.fraction(recorder.training_seconds) <= 0.02 * 1.05
    two_tail_steps = len(exporter.submitted) * (Costs.export_steps - 2) * Costs.export_step
    assert budget.total_cost > paid - two_tail_steps / 2  # the steps after the first two are charged


def first_prepare_slow(seconds: float = 0.5) -> Costs:
    """The costs with a first window whose preparation (Kineto's and CUPTI's set-up) takes ``seconds``."""
    first = {"done": False}

    class FirstSlow(Costs):
        @property
        def prepare(self):
            if first["done"]:
                return Costs.prepare
            first["done"] = True
            return seconds

    return FirstSlow()


def test_the_first_windows_set_up_is_charged():
    """Kineto's and CUPTI's set-up make the first window's preparation 0.5 s (later ones 10 ms): it is charged (the
    stated cost is what the run paid, the set-up included), and the later windows make room for it."""
    costs = Costs()
    calm, calm_exporter, _ = simulate(costs=costs)
    slow, exporter, paid = simulate(costs=first_prepare_slow())
    assert slow.budget.total_cost == pytest.approx(paid, rel=0.02) and paid > 0.5
    assert slow.budget.fraction(slow.training_seconds) <= 0.02 * 1.05
    assert len(exporter.submitted) <= len(calm_exporter.submitted) - 5  # 0.5 s is 5 windows' worth


def test_a_stall_in_a_recorded_step_is_not_the_profilers():
    """A 3 s stall in the first window's second recorded step (a slow fetch) is charged as a typical step of that
    window: the cost stays near what profiling cost and the run keeps sampling, with as many windows as without the
    stall (13 within three quarters of the 2% budget; the 3 s charged would leave room for 1)."""
    calm, calm_exporter, _ = simulate()
    stalled, exporter, paid = simulate(stall_at=23)
    assert stalled.budget.total_cost == pytest.approx(paid, abs=3 * Costs.window_step)
    assert len(exporter.submitted) >= len(calm_exporter.submitted) >= 13


def test_a_stall_while_the_export_runs_is_not_the_profilers():
    stalled, exporter, paid = simulate(stall_at=29)  # window 0 records 22..24; its export runs 25..32
    calm, calm_exporter, _ = simulate()
    assert stalled.budget.total_cost == pytest.approx(paid, abs=3 * Costs.window_step)
    assert len(exporter.submitted) >= len(calm_exporter.submitted)


@pytest.mark.parametrize("noise", [
    pytest.param(lambda rng: rng.gauss(0.0, 0.005), id="gaussian-5%"),
    pytest.param(lambda rng: rng.expovariate(1 / 0.004), id="skewed"),
    pytest.param(lambda rng: 0.5 if rng.random() < 0.01 else 0.0, id="rare-half-second-stalls"),
])
def test_noise_is_not_charged(noise):
    """Step-time noise (symmetric, skewed, rare stalls) averages out instead of adding up: the charged cost stays
    within 25% of what the run paid."""
    recorder, exporter, paid = simulate(steps=2000, noise=noise)
    assert len(exporter.submitted) >= 20
    assert recorder.budget.total_cost == pytest.approx(paid, rel=0.25)


def test_a_window_waits_while_its_export_is_over_budget():
    """An export that costs far more than its window (40 steps at +10 ms) moves the next window later, at its
    start, so that the stated cost stays within the budget."""
    costs = Costs()
    costs.export_steps, costs.export_step = 40, 0.010
    recorder, exporter, paid = simulate(costs=costs)
    assert recorder.moves  # windows were moved
    assert recorder.budget.total_cost == pytest.approx(paid, rel=0.05)
    assert recorder.budget.fraction(recorder.training_seconds) <= 0.02 * 1.1


def test_overhead_budget_by_hand():
    """Baseline steps of 1 s (spread: 1% of it). A window of two steps: 1.5 s with 0.1 s of the profiler's own
    (excess 0.4 s) and a tainted one (validation inside) charged its own time only. The export's first step is 1.1 s
    (excess 0.1 s), its second 5 s: capped at 3 x the window's median excess, 1.2 s. With 2% of 10 s elapsed, and
    the next window expected to cost as much (1.8 s), it waits until (1.8 + 1.8) / 0.02 - 10 = 170 s more of
    training: 170 steps; planned within the default three quarters of the budget, (1.8 + 1.8) / 0.015 - 10 = 230."""
    budget = OverheadBudget(max_overhead=0.02, plan_share=1.0)
    assert budget.defer_steps(elapsed=1.0) == 0  # no baseline yet
    for _ in range(3):
        budget.unprofiled_step(1.0)
    budget.begin_window()
    budget.window_step(1.5, own=0.1)
    budget.window_step(2.0, own=0.0, tainted=True)
    budget.end_window()
    assert budget.total_cost == pytest.approx(0.5)
    budget.tail_step(1.1, own=0.0)
    assert not budget.tail_done
    budget.tail_step(5.0, own=0.0)
    assert budget.tail_done
    assert budget.total_cost == pytest.approx(1.8)
    budget.end_period()
    assert budget.total_cost == pytest.approx(1.8) and budget.windows == 1
    assert budget.defer_steps(elapsed=10.0) == 170
    budget.plan_share = 0.75
    assert budget.defer_steps(elapsed=10.0) == 230
    assert budget.fraction(90.0) == pytest.approx(0.02)
    assert OverheadBudget(max_overhead=None).defer_steps(elapsed=0.0) == 0


def test_baseline_is_robust():
    """The baseline's location is the mean of the steps clamped to the median +- 4 spreads: a rare 10 s step moves
    it by a little, not by 10 s / 64."""
    baseline = StepBaseline(64)
    for i in range(63):
        baseline.add(1.0 + (0.01 if i % 2 else -0.01))
    baseline.add(10.0)
    location, spread = baseline.stats
    assert spread == pytest.approx(0.01 * 1.4826, rel=0.01)
    assert 1.0 < location < 1.0 + 4 * spread / 64 + 1e-9


def test_a_run_too_short_for_its_first_window_says_so():
    """A first window that costs 0.5 s in a 100-step run (~1 s of training) is far above a 1% budget: the cost
    states it, with the first window's own cost, and no second window follows."""
    recorder, exporter, paid = simulate(steps=100, costs=first_prepare_slow(), max_overhead=0.01)
    budget = recorder.budget
    assert len(exporter.submitted) == 1 and budget.first_window_cost == pytest.approx(paid, rel=0.02)
    cost = ProfilingCost(budget.total_cost, recorder.training_seconds, budget.windows,
                         max_overhead=budget.max_overhead, first_window_seconds=budget.first_window_cost)
    assert cost.over_budget and f"({budget.first_window_cost:.2f} s here)" in cost_sentence(cost)


def test_the_first_windows_cost_is_split_where_it_was_paid():
    """Kineto's set-up, start and stop (the profiler's own time), the slower warm-up and recorded steps, and the steps
    of its export: each part is what the fake run put there, and they add up to the first window's cost, which the
    sentence of a cost over budget states."""
    costs = Costs()
    recorder, _, _ = simulate(steps=200, costs=costs, max_overhead=0.0001)
    budget = recorder.budget
    parts = budget.first_window_parts
    assert parts == pytest.approx({"profiler": costs.prepare + costs.start + costs.save,
                                   "steps": 5 * costs.window_step, "export": costs.export_steps * costs.export_step})
    assert sum(parts.values()) == pytest.approx(budget.first_window_cost)
    assert recorder.first_window_calls == pytest.approx({"prepare": costs.prepare, "start": costs.start,
                                                         "stop": costs.save})  # the first window's only
    cost = ProfilingCost(budget.total_cost, recorder.training_seconds, budget.windows, max_overhead=0.0001,
                         first_window_seconds=budget.first_window_cost, first_window_parts=parts)
    assert ("(0.07 s here: 0.02 s Kineto's set-up, start and stop in the training thread, 0.03 s slower warm-up and"
            " recorded steps, 0.02 s steps while its trace was saved, analysed and written)") in cost_sentence(cost)


def test_a_save_that_does_not_end_leaves_the_next_window_unrecorded_with_a_reason():
    class StuckExporter(FakeExporter):
        timeout = 0.01

        def __init__(self, costs):
            super().__init__(costs)
            self.problems = Problems()

        def wait_saved(self, timeout) -> bool:
            return not self.submitted  # the first window's save never ends

    costs, clock = Costs(), Clock()
    exporter = StuckExporter(costs)
    schedule = WindowSchedule(skip_first=2, warmup=1, active=1, every=4)
    recorder = WindowRecorder(schedule, OverheadBudget(None), exporter, lambda: FakeSession(clock, costs),
                              lambda: 0, run_name="run", run_dir="/nowhere", rank=0, world_size=1, clock=clock)
    for _ in range(14):
        recorder.step_boundary(lambda: 0)
        clock.advance(BASE)
    assert len(exporter.submitted) == 1
    assert exporter.problems.drain() == ["a window was not recorded: the previous window's trace was still being"
                                         " saved after 0.01 s"]
