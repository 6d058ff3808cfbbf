"""Trace files are data: analysing one opens no other file it names, unpickles nothing and compiles or runs none
of its text (checked with audit hooks in a process of its own)."""

import json
import os
import subprocess
import sys

from tracebuilder import TraceBuilder

MARK = "streamprof_marker_7f3a"
PROGRAM = r"""
import json, os, sys
events = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir", "pickle.find_class", "exec", "compile", "subprocess.Popen",
                 "os.system", "marshal.loads", "builtins.input", "socket.connect"):
        events.append((event, repr(args)[:300]))
sys.addaudithook(hook)
from lightning_streamprof.cli import main
code = main(["analyze", sys.argv[1]])
code_json = main(["analyze", sys.argv[1], "--json"])
sys.stdout.flush()
print("\nAUDIT" + json.dumps({"code": [code, code_json], "events": events}))
"""


def hostile_trace(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text(f"raise SystemExit('{MARK} executed')\n")
    pickled = tmp_path / "model.pkl"
    pickled.write_bytes(b"\x80\x04K\x01.")
    b = TraceBuilder()
    b.step(0, 0, 100)
    ext = b.op(f"__import__('os').system('echo {MARK}')", 5, 50, **{"Input Dims": [[str(pickled)]]})
    b.launch(f"<script>{MARK}</script>\x1b]8;;file://{secret}\x07", 6, 10, 30, ext, blocks=1.0, occupancy=0.5)
    b.frame(f"{secret}(1): <module>", 5, 50)
    b.frame(f"{MARK}.py(3): exec", 6, 40)
    b.meta["deviceProperties"] = [{"id": 0, "name": f"{secret}"}]
    b.meta["streamprof"] = {"run": f"../../{MARK}", "host": str(secret)}
    return b.write(tmp_path / "hostile.pt.trace.json.gz"), secret, pickled


def test_analysis_opens_only_the_trace_and_runs_no_trace_text(tmp_path):
    path, secret, pickled = hostile_trace(tmp_path)
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(path)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.rsplit("AUDIT", 1)[1])
    assert report["code"] == [0, 0]
    events = report["events"]
    assert not [e for e in events if e[0] in ("pickle.find_class", "os.system", "subprocess.Popen", "builtins.input",
                                              "socket.connect")]
    assert not [e for e in events if e[0] in ("exec", "compile", "marshal.loads") and MARK in e[1]]  # no trace text run
    opened = [e[1] for e in events if e[0] == "open"]
    assert not [o for o in opened if str(secret) in o or str(pickled) in o or MARK in o]
    data_files = [o for o in opened if str(tmp_path) in o]
    assert data_files and all(str(path) in o for o in data_files)  # the trace itself, nothing else of the folder
    assert f"{MARK} executed" not in out.stdout + out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert os.path.exists(secret)
