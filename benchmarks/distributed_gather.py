"""The live gather at scale: N simulated ranks over N / per-host simulated hosts, a real ``TCPStore`` on loopback.

    python -m benchmarks distributed-gather --ranks 16384 --per-host 8 --windows 3

Rank 0 runs in a process of its own, as in a real job: it hosts the store's server (as torch's rank 0 does) and
runs the profiler's own :class:`~lightning_streamprof.distributed.live.LiveAggregator`. This process plays every
other rank with the same class: each non-leader rank posts its window (about 1 KB), then each host's leader
gathers its host and posts one table, then rank 0 gathers the hosts' tables, decodes them and scores the window.
The hosts run one after the other here (on a real cluster they run at once), so the result reports each level's
own time: rank 0's time per window (from the start of its gather to the scored result), the slowest and the
median host leader's, and their sum (a window's latency when every host is as slow as the slowest). Also: bytes
per rank, rank 0's peak resident memory per window (it must not grow with the windows) and its peak Python
allocation (tracemalloc, one more window), and two faults: a dead rank (its leader waits for it once, at most
half the timeout, and names it) and a dead host (rank 0 waits for it once, at most the timeout, and names its
ranks).

Writes ``distributed_gather-<tag>-<date>.json`` and ``.md`` under ``--out`` (default ``benchmarks/results/distributed-gather/``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _record import code_version, command, machine, machine_line, now, results_dir  # noqa: E402


def _aggregator(store, rank: int, args: argparse.Namespace):
    from lightning_streamprof.distributed.exchange import StoreExchange
    from lightning_streamprof.distributed.live import LiveAggregator

    exchange = StoreExchange(store, rank, args.ranks, prefix="streamprof/bench", timeout=args.timeout)
    return LiveAggregator(exchange, threshold=0.75, gather_after=None, log_metrics=lambda m, s: None,
                          global_step=lambda: 0, per_host=args.per_host)


def _peak_rss_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM, the peak resident size
    except OSError:
        pass


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


# ---------------------------------------------------------------------------------------------- rank 0
def rank_zero(args: argparse.Namespace) -> None:
    """Host the store, then for each window: wait for the go key, gather + score, post the measurement."""
    import faulthandler
    import tracemalloc
    import warnings

    import torch.distributed as dist

    import lightning_streamprof.distributed.live as live

    faulthandler.enable()
    store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False, use_libuv=True)
    print(store.port, flush=True)
    scored = {}
    real_score = live.score_table

    def timed_score(*a, **k):
        t0 = time.perf_counter()
        out = real_score(*a, **k)
        scored["s"] = time.perf_counter() - t0
        return out

    live.score_table = timed_score
    agg = _aggregator(store, 0, args)
    baseline = _status("VmRSS")
    store.set("bench/zero-ready", b"1")
    for n in range(_windows(args)):
        import datetime

        store.wait([f"bench/go/{n}"], datetime.timedelta(seconds=3600))
        trace_memory = n == args.windows  # one window under tracemalloc (it slows Python allocations)
        if trace_memory:
            tracemalloc.start()
        _peak_rss_reset()
        agg.window_ended(n, stop=10, next_start=None, window_dir=None)
        agg.add_local(n, _ROWS.get(n), global_step=n)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            agg.finish()
            seconds = time.perf_counter() - t0
        stats = agg.results[-1]
        out = {"window": n, "rank0_s": seconds, "score_s": scored.get("s"), "ranks_scored": len(stats.ranks),
               "missing": live.rank_ranges(stats.missing_ranks), "stragglers": stats.stragglers,
               "peak_rss_mib": _status("VmHWM") / 2**20, "rss_mib": _status("VmRSS") / 2**20,
               "baseline_rss_mib": baseline / 2**20, "warnings": [str(w.message)[:300] for w in caught][:3]}
        if trace_memory:
            out["tracemalloc_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        store.set(f"bench/done/{n}", json.dumps(out).encode())
    store.wait(["bench/bye"], datetime.timedelta(seconds=600))  # the server lives in this process

def _windows(args: argparse.Namespace) -> int:
    """Windows of a run: the timed ones, one under tracemalloc, a dead rank and the window after, a dead host and
    the window after."""
    return args.windows + 5


class _Rows(dict):
    """Rank 0's own row (the same each window)."""


_ROWS = _Rows()


# ---------------------------------------------------------------------------------------------- the others
def simulate(args: argparse.Namespace) -> dict:
    import datetime

    import torch.distributed as dist
    from distributed_scoring import synthetic_windows

    from lightning_streamprof.distributed.live import payload, payload_limit

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    zero = subprocess.Popen([sys.executable, __file__, "--rank-zero", *sys.argv[1:]], stdout=subprocess.PIPE,
                            text=True, env=env)
    port = int(zero.stdout.readline())
    store = dist.TCPStore("127.0.0.1", port, 1, False, use_libuv=True)
    store.wait(["bench/zero-ready"], datetime.timedelta(seconds=120))

    t0 = time.perf_counter()
    rows = synthetic_windows(args.ranks, slow=args.slow, steps=args.steps, calls=args.calls)
    build_s = time.perf_counter() - t0
    limit = payload_limit(args.ranks)
    t0 = time.perf_counter()
    payloads = [payload(r, limit) for r in rows]
    encode_ms = 1e3 * (time.perf_counter() - t0) / args.ranks
    sizes = [len(p) for p in payloads]
    aggs = [None] + [_aggregator(store, r, args) for r in range(1, args.ranks)]
    leaders = [a for a in aggs[1:] if a.tree.is_leader()]
    others = [a for a in aggs[1:] if not a.tree.is_leader()]
    dead_rank = args.ranks - args.per_host // 2 - 1 if args.per_host > 1 else args.ranks - 1
    first = (args.ranks // 4) // args.per_host * args.per_host  # a host away from the slow rank's
    dead_host = set(range(first, first + args.per_host)) if args.per_host > 1 and args.ranks >= 4 * args.per_host \
        else set()
    gone = {dead_rank} | dead_host  # the dead stay dead
    plans = [("all present", set())] * args.windows + [
        ("all present, under tracemalloc", set()), ("dead rank", {dead_rank}), ("dead rank, next window", {dead_rank}),
        ("dead host", gone), ("dead host, next window", gone)]
    assert len(plans) == _windows(args)
    windows = []
    for n, (scenario, dead) in enumerate(plans):
        for a in aggs[1:]:
            a.window_ended(n, stop=10, next_start=None, window_dir=None)
            a._outbox[n] = payloads[a.rank]  # what add_local makes of the row (encoded once above)
        t0 = time.perf_counter()
        for a in others:
            if a.rank not in dead:
                a.finish()
        post_s = time.perf_counter() - t0
        leader_s = []
        for a in leaders:
            if a.rank in dead:
                continue
            t1 = time.perf_counter()
            a.finish()
            leader_s.append(time.perf_counter() - t1)
        try:
            store.set(f"bench/go/{n}", b"1")
            store.wait([f"bench/done/{n}"], datetime.timedelta(seconds=600))
            result = json.loads(store.get(f"bench/done/{n}"))
        except Exception:
            time.sleep(1)
            print("rank 0 exit status", zero.poll(), flush=True)
            raise
        result.update(scenario=scenario, ranks_post_s=post_s, leader_max_s=max(leader_s),
                      leader_median_s=statistics.median(leader_s),
                      window_latency_s=result["rank0_s"] + max(leader_s))
        windows.append(result)
        print(f"window {n} ({scenario}): rank 0 {result['rank0_s']:.3f} s (score {result['score_s']:.3f} s), "
              f"leaders median {result['leader_median_s'] * 1e3:.1f} ms max {result['leader_max_s'] * 1e3:.1f} ms, "
              f"peak RSS {result['peak_rss_mib']:.0f} MiB, missing [{result['missing']}]", flush=True)
    store.set("bench/bye", b"1")
    zero.wait(60)
    return {"ranks": args.ranks, "hosts": args.ranks // args.per_host, "per_host": args.per_host,
            "steps": args.steps, "calls_per_step": args.calls, "timeout_s": args.timeout,
            "payload_limit": limit, "payload_bytes_max": max(sizes), "payload_bytes_mean": statistics.mean(sizes),
            "encode_ms_per_rank": encode_ms, "build_rows_s": build_s, "dead_rank": dead_rank,
            "dead_host_ranks": f"{min(dead_host)}-{max(dead_host)}" if dead_host else None, "windows": windows}


def _markdown(result: dict, meta: dict) -> str:
    lines = [f"# distributed_gather — {meta['date']}", "", f"`{meta['command']}`", "",
             f"Machine: {meta['machine']}. Code: {meta['code']}.", "",
             f"{result['ranks']:,} simulated ranks over {result['hosts']:,} simulated hosts ({result['per_host']} per "
             f"host), a window of {result['steps']} steps x {result['calls_per_step']} collective calls per rank; "
             f"a real TCPStore on loopback; gather timeout {result['timeout_s']:g} s (a leader waits at most half).",
             "", f"Bytes per rank: max {result['payload_bytes_max']:,}, mean {result['payload_bytes_mean']:.0f} "
             f"(limit at this world size {result['payload_limit']:,}); encoding {result['encode_ms_per_rank']:.2f} ms "
             "per rank.", "",
             "| window | scenario | rank 0: gather + score s | of which scoring s | host leader median / max ms | "
             "latency s (rank 0 + slowest leader) | rank 0 peak RSS MiB (over its RSS before the first window) | "
             "missing ranks |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for w in result["windows"]:
        lines.append(f"| {w['window']} | {w['scenario']} | {w['rank0_s']:.3f} | {w['score_s']:.3f} | "
                     f"{w['leader_median_s'] * 1e3:.1f} / {w['leader_max_s'] * 1e3:.1f} | {w['window_latency_s']:.3f} | "
                     f"{w['peak_rss_mib']:.0f} (+{w['peak_rss_mib'] - w['baseline_rss_mib']:.0f}) | {w['missing'] or '-'} |")
    traced = [w for w in result["windows"] if "tracemalloc_peak_mib" in w]
    if traced:
        lines += ["", f"Rank 0's peak Python allocation during one window's gather and scoring (tracemalloc, window "
                  f"{traced[0]['window']}): {traced[0]['tracemalloc_peak_mib']:.0f} MiB; its resident memory before "
                  f"the first window {traced[0]['baseline_rss_mib']:.0f} MiB (it hosts the store's server, as torch's "
                  "rank 0 does)."]
    stragglers = {tuple(w["stragglers"]) for w in result["windows"]}
    lines += ["", f"Stragglers found in every window: {sorted(stragglers)}.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16384)
    parser.add_argument("--per-host", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--windows", type=int, default=3, help="timed windows with every rank present")
    parser.add_argument("--timeout", type=float, default=4.0, help="the gather timeout (s)")
    parser.add_argument("--slow", type=int, default=None, help="the slow rank (default: the middle one)")
    parser.add_argument("--tag", default="cpu")
    parser.add_argument("--out", default=str(results_dir(__file__)))
    parser.add_argument("--rank-zero", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.slow = args.ranks // 2 + 1 if args.slow is None else args.slow
    if args.rank_zero:
        from distributed_scoring import synthetic_windows

        row = synthetic_windows(1, slow=-1, steps=args.steps, calls=args.calls)[0]
        row = type(row)(**{**{f: getattr(row, f) for f in row.__struct_fields__}, "world_size": args.ranks})
        for n in range(_windows(args)):
            _ROWS[n] = types.SimpleNamespace(distributed=types.SimpleNamespace(summaries=[row]))
        rank_zero(args)
        return 0
    result = simulate(args)
    meta = {"machine": machine_line(machine()), "date": now(), "command": command("distributed_gather.py"),
            "code": code_version()}
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"distributed_gather-{args.tag}-{time.strftime('%Y%m%d')}")
    with open(base + ".json", "w") as f:
        json.dump({**meta, **result}, f, indent=2)
    text = _markdown(result, meta)
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    ok = all(w["rank0_s"] < 2.0 for w in result["windows"] if w["scenario"] == "all present")
    return 0 if ok and result["payload_bytes_max"] < 4096 else 1


if __name__ == "__main__":
    sys.exit(main())
