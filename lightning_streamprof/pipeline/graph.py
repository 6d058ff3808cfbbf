"""Frozen calls captured as CUDA graphs, one per input signature and autocast state."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

import torch

from lightning_streamprof.pipeline import pytree


def _autocast_state(device: torch.device) -> torch.dtype | None:
    """The autocast dtype in force for ``device`` (``None``: autocast is off)."""
    kind = device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


class GraphedForward:
    """Replays ``forward(*tensors)`` as a CUDA graph per input signature (shapes, dtypes, devices, autocast dtype);
    the output may be any structure of tensors (:mod:`.pytree`).

    Replays run on the current (side) stream; the output's tensors are cloned so that the next replay cannot
    overwrite a result the training stream still reads. Under mixed precision the capture runs with autocast
    active and its weight-cast cache off (graph capture needs each cast inside the graph), and each new graph's
    output is checked against the eager forward once before it is used. After ``max_graphs`` signatures, new
    ones run eagerly; a forward that cannot be captured (a host synchronisation, a CPU operation), or whose graph
    differs from eager, runs eagerly from then on, with one warning (``failure`` keeps the reason).

    Where ``defer()`` is true (on the staging thread) a new signature runs eagerly and is captured by the next
    :meth:`capture_pending`, called on the training thread while no other thread stages: a capture marks the
    device's default CUDA generator as capturing, and a random draw on another thread meanwhile would fail.
    """

    def __init__(self, forward: Callable[..., Any], max_graphs: int = 2, warmup: int = 3,
                 defer: Callable[[], bool] = lambda: False,
                 on_failure: Callable[[BaseException], bool] | None = None) -> None:
        self.forward = forward
        self.on_failure = on_failure  # told of a failed capture; ``True``: the forward changed, capture again
        self.max_graphs = max_graphs
        self.warmup = warmup
        self.defer = defer
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]] = {}
        self._pending: dict[tuple, tuple[tuple[torch.Tensor, ...], torch.dtype | None]] = {}
        self.replays = 0
        self.eager = 0
        self.failure: str | None = None

    @staticmethod
    def _key(xs: tuple[torch.Tensor, ...]) -> tuple[tuple, torch.dtype | None]:
        amp = _autocast_state(xs[0].device)
        return tuple((tuple(x.shape), x.dtype, x.device) for x in xs) + (amp,), amp

    def __call__(self, *xs: torch.Tensor) -> Any:
        key, amp = self._key(xs)
        entry = self._graphs.get(key)
        if entry is None:
            if self._may_capture(*xs):
                if self.defer():
                    self._pending.setdefault(key, (xs, amp))
                else:
                    entry = self._try_capture(key, xs, amp)
            if entry is None:
                self.eager += 1
                with torch.no_grad():
                    return self.forward(*xs)
        graph, static_in, static_out = entry
        for s, x in zip(static_in, xs):
            s.copy_(x)
        graph.replay()
        self.replays += 1
        return pytree.map_tensors(torch.clone, static_out)

    def prepare(self, *xs: torch.Tensor) -> None:
        """Capture the graph for these inputs' signature now (on the current stream), so that its first use
        replays."""
        key, amp = self._key(xs)
        self._capture_until_done(key, xs, amp)

    def _capture_until_done(self, key: tuple, xs: tuple[torch.Tensor, ...], amp: torch.dtype | None) -> None:
        """Capture, again after a failure that changed the forward (``on_failure``), until one succeeds or fails
        for good."""
        for _ in range(8):
            if key in self._graphs or not self._may_capture(*xs) or self._try_capture(key, xs, amp) is not None:
                return

    @property
    def pending(self) -> bool:
        """Whether signatures wait for :meth:`capture_pending`."""
        return bool(self._pending)

    @property
    def captured(self) -> bool:
        return bool(self._graphs)

    def capture_pending(self) -> None:
        """Capture the signatures that were deferred (on the current stream, the one they were staged on)."""
        pending, self._pending = self._pending, {}
        for key, (xs, amp) in pending.items():
            self._capture_until_done(key, xs, amp)

    def release(self) -> None:
        """Drop the captured graphs and their memory (captured again if used again)."""
        self._graphs.clear()
        self._pending.clear()

    def _may_capture(self, *xs: torch.Tensor) -> bool:
        return len(self._graphs) < self.max_graphs and self.failure is None and bool(xs) and all(x.is_cuda for x in xs)

    def _try_capture(self, key: tuple, xs: tuple[torch.Tensor, ...], amp: torch.dtype | None) -> tuple | None:
        try:
            entry = self._capture(xs, amp)
            self._check(entry, amp)
        except Exception as err:  # noqa: BLE001 - not capturable: eager from now on
            if self.on_failure is not None and self.on_failure(err):
                return None  # the forward left out what failed: captured again at the next chance
            self.failure = f"{type(err).__name__}: {err}".splitlines()[0]
            warnings.warn(f"StreamPipeline: the frozen calls cannot be captured as a CUDA graph"
                          f" ({self.failure}); they run eagerly.", stacklevel=3)
            return None
        self._graphs[key] = entry
        return entry

    def _autocast(self, device: torch.device, amp: torch.dtype | None) -> contextlib.AbstractContextManager:
        if amp is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=amp, cache_enabled=False)

    def _capture(self, xs: tuple[torch.Tensor, ...], amp: torch.dtype | None) -> tuple:
        static_in = [x.clone() for x in xs]
        stream = torch.cuda.current_stream()
        with torch.no_grad(), self._autocast(xs[0].device, amp):
            for _ in range(self.warmup):  # on the current side stream, as CUDA graph capture requires
                self.forward(*static_in)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            # capture_begin/end rather than ``torch.cuda.graph``, which empties the device and pinned-host caches
            # (the loader's pinning and the training step would then allocate afresh); thread-local: other threads
            # (training, pinning) keep calling CUDA while this one captures
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                static_out = self.forward(*static_in)
            except Exception:
                with contextlib.suppress(Exception):
                    graph.capture_end()
                _clear_generator_capture(xs[0].device)
                raise
            graph.capture_end()
        return graph, static_in, static_out

    def _check(self, entry: tuple, amp: torch.dtype | None) -> None:
        """The graph's output equals the eager forward's on the captured input (once per graph)."""
        graph, static_in, static_out = entry
        graph.replay()
        with torch.no_grad(), self._autocast(static_in[0].device, amp):
            eager = self.forward(*static_in)
        if not outputs_close(static_out, eager):
            raise RuntimeError("the graph's output differs from the eager forward's")


def outputs_close(got: Any, want: Any) -> bool:
    """Same structure and every tensor close (TF32 convolutions and half precision: loose tolerances)."""
    a, b = pytree.tensors(got), pytree.tensors(want)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point():
            tol = 1e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-3
            if not torch.allclose(x.float(), y.float(), rtol=tol, atol=tol, equal_nan=True):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def _clear_generator_capture(device: torch.device) -> None:
    """A failed capture leaves the device's default CUDA generator marked as capturing, so that every later
    eager random draw on it fails; the end of a capture that succeeds clears the mark."""
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
            torch.zeros(1, device=device)
    except Exception as err:  # noqa: BLE001
        warnings.warn(f"StreamPipeline: the CUDA generator may be left in capture mode ({err})", stacklevel=2)
