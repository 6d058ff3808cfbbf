import os
import subprocess
import sys
from collections import defaultdict

from traces_on_disk import load_trace, step_numbers, trace_files

HERE = os.path.dirname(os.path.abspath(__file__))


def test_ddp_gloo_writes_one_file_per_global_rank_per_window(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "ddp_program.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=400, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "rank 0 windows 2 steps 20" in proc.stdout and "rank 1 windows 2 steps 20" in proc.stdout
    by_window = defaultdict(dict)
    for path in trace_files(tmp_path):
        trace = load_trace(path)
        info = trace["distributedInfo"]
        assert info["world_size"] == 2 and info["backend"] == "gloo"
        rank = info["rank"]
        assert os.path.basename(path).startswith(f"rank{rank}.")
        by_window[os.path.dirname(path)][rank] = step_numbers(trace)
    assert len(by_window) == 2  # steps 4-5 and 12-13; step 20 is past max_steps
    for ranks in by_window.values():
        assert set(ranks) == {0, 1}
        assert ranks[0] == ranks[1]
    assert len({os.path.dirname(d) for d in by_window}) == 1  # one run directory shared by both ranks
