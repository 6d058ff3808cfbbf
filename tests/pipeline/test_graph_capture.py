"""When and where the backbone's CUDA graphs are captured (the capture itself is replaced: CPU tests)."""

import pytest
import torch

from lightning_streamprof.pipeline.graph import GraphedForward


class FakeGraph:
    """Replays by running the forward on the static inputs into the static output."""

    def __init__(self, forward, static_in, static_out):
        self.forward, self.static_in, self.static_out = forward, static_in, static_out

    def replay(self):
        self.static_out.copy_(self.forward(*self.static_in))


@pytest.fixture
def graphed(monkeypatch):
    """A GraphedForward of ``2x + 1`` that may capture CPU tensors; ``captures`` lists the captured inputs."""
    captures = []

    def capture(self, xs, amp=None):
        captures.append(xs)
        static_in = [x.clone() for x in xs]
        static_out = self.forward(*static_in)
        return FakeGraph(self.forward, static_in, static_out), static_in, static_out

    monkeypatch.setattr(GraphedForward, "_capture", capture)
    monkeypatch.setattr(GraphedForward, "_may_capture", lambda self, *xs: len(self._graphs) < self.max_graphs
                        and self.failure is None)
    g = GraphedForward(lambda x: 2 * x + 1)
    g.captures = captures
    return g


def test_a_new_shape_is_captured_at_once_where_capture_is_not_deferred(graphed):
    x = torch.arange(4.0)
    assert torch.equal(graphed(x), 2 * x + 1) and graphed.replays == 1 and len(graphed.captures) == 1
    y = torch.arange(4.0) + 10
    assert torch.equal(graphed(y), 2 * y + 1) and graphed.replays == 2 and len(graphed.captures) == 1


def test_on_the_staging_thread_a_new_shape_runs_eagerly_until_the_training_thread_captures_it(graphed):
    deferring = True
    graphed.defer = lambda: deferring
    x = torch.arange(4.0)
    assert torch.equal(graphed(x), 2 * x + 1)
    assert graphed.eager == 1 and graphed.replays == 0 and not graphed.captures and graphed.pending
    graphed(x + 1)  # the same shape again: still eager, one pending capture
    assert graphed.eager == 2 and graphed.pending
    deferring = False
    graphed.capture_pending()  # the training thread, no staging running
    assert len(graphed.captures) == 1 and not graphed.pending
    deferring = True
    y = torch.arange(4.0) * 3
    assert torch.equal(graphed(y), 2 * y + 1) and graphed.replays == 1  # replayed on the staging thread
    graphed(torch.ones(2, 3))  # a second shape waits for its own capture
    assert graphed.pending and graphed.eager == 3
    graphed.release()
    assert not graphed.pending and not graphed._graphs


def test_a_deferred_capture_that_fails_runs_eagerly_with_one_warning(graphed, monkeypatch):
    def fail(self, xs, amp=None):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(GraphedForward, "_capture", fail)
    graphed.defer = lambda: True
    x = torch.arange(3.0)
    graphed(x)
    with pytest.warns(UserWarning, match="cannot be captured as a CUDA graph .RuntimeError: operation not permitted"):
        graphed.capture_pending()
    assert graphed.failure == "RuntimeError: operation not permitted when stream is capturing"
    assert torch.equal(graphed(x), 2 * x + 1) and not graphed.pending and graphed.eager == 2


def test_a_call_that_cannot_be_captured_leaves_the_graph_and_runs_eagerly_after_it(monkeypatch):
    """Two staged calls and one that reads the second's output: the second cannot be captured (a host
    synchronisation), so it and its reader run eagerly after the graph of the first."""
    from lightning_streamprof.pipeline import pytree as tree
    from lightning_streamprof.pipeline.derivation import BatchLeaf, CallOutput
    from lightning_streamprof.pipeline.program import Arg, Program, StagedCall

    capturing = []

    def capture(self, xs, amp=None):
        static_in = [x.clone() for x in xs]
        capturing.append(True)
        try:
            static_out = self.forward(*static_in)
        finally:
            capturing.pop()
        return Replayed(), static_in, static_out  # replays of the same batch: the captured outputs stand

    class Replayed:
        def replay(self):
            pass

    monkeypatch.setattr(GraphedForward, "_capture", capture)
    monkeypatch.setattr(GraphedForward, "_check", lambda self, entry, amp: None)
    monkeypatch.setattr(GraphedForward, "_may_capture", lambda self, *xs: self.failure is None)

    def syncs(x):
        if capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        return x * 3

    leaf = BatchLeaf((("item", 0),))
    spec = tree.flatten(((torch.zeros(1),), {}))[0]
    calls = [StagedCall(0, "a", "forward", None, lambda x: x + 1, spec, (Arg("same", leaf),), None),
             StagedCall(1, "b", "forward", None, syncs, spec, (Arg("same", leaf),), None),
             StagedCall(2, "c", "forward", None, lambda x: x - 1, spec, (Arg("same", CallOutput(1, ())),), None,
                        frozenset({1}))]
    program = Program(calls)
    program.graph = GraphedForward(program.graph_forward, on_failure=program.graph_failed)
    batch = (torch.arange(3.0),)
    with pytest.warns(UserWarning, match="`b.forward`, `c.forward` cannot be captured in a CUDA graph .RuntimeError"):
        program.graph.prepare(*program.root_values(batch))
    assert program.ungraphed == {1, 2} and program.graph.captured and program.graph.failure is None
    run = program.run(batch, use_graph=True)
    assert [o.tolist() for o in run.outputs] == [[1.0, 2.0, 3.0], [0.0, 3.0, 6.0], [-1.0, 2.0, 5.0]]
    assert program.graph.replays == 1 and "run eagerly beside the graph" in program.notes[0]
