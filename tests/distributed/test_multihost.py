"""A two-host run read as one: ``streamprof analyze/report/compare`` take each host's directory and merge them by
run, window and global rank (numbers against the hand computation in :mod:`multihost`)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from multihost import HOSTS, RUN, write_hosts

from lightning_streamprof.api import analyze, analyze_runs

MS = 1e-3  # one µs in ms


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture()
def hosts(tmp_path):
    return write_hosts(tmp_path)


def test_two_directories_are_one_run_with_every_rank(hosts):
    d = analyze([hosts["node-a"], hosts["node-b"]]).distributed
    assert d.world_size == 4 and d.missing_ranks == [] and [r.rank for r in d.ranks] == [0, 1, 2, 3]
    assert {r.rank: r.host for r in d.ranks} == HOSTS
    for r in d.ranks:
        assert r.steps == 2 and r.transfer_ms == pytest.approx(10 * MS)
        assert r.sync_ms == pytest.approx((0 if r.rank == 3 else 30) * MS)
    assert d.stragglers == [3] and d.ranks[3].relative_score == pytest.approx(0.70)
    assert d.message.startswith("Rank 3 (host node-b) is a straggler")
    (late,) = {(ls.late_rank, ls.ranks) for ls in d.late_starts}
    assert late == (3, 4)  # the calls of both hosts matched by group, name and sequence number


def test_one_host_alone_names_the_other_hosts_ranks_missing(hosts):
    d = analyze(hosts["node-a"]).distributed
    assert [r.rank for r in d.ranks] == [0, 1] and d.missing_ranks == [2, 3] and d.stragglers == []


def test_a_rank_found_twice_is_read_once_and_named(hosts, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(hosts["node-b"], copy)
    (run,) = analyze_runs([hosts["node-a"], hosts["node-b"], str(copy), hosts["node-a"]])
    assert [len(w.ranks) for w in run.windows] == [4]
    skipped = [w for w in run.merged.warnings if "skipped: rank" in w]
    assert len(skipped) == 2 and all("is already read from" in w for w in skipped)


def test_cli_analyze_report_and_compare_take_each_hosts_directory(hosts, tmp_path):
    out = _cli("analyze", hosts["node-a"], hosts["node-b"], "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)["distributed"]
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3] and d["stragglers"] == [3]
    html_path = tmp_path / "report.html"
    out = _cli("report", hosts["node-a"], hosts["node-b"], "-o", str(html_path))
    assert out.returncode == 0, out.stderr
    html = html_path.read_text(encoding="utf-8")
    assert "node-a" in html and "node-b" in html and "rank 3 (straggler)" in html
    assert "4 ranks on 2 hosts (node-a, node-b)" in html and "no trace of rank" not in html
    alone = tmp_path / "alone.html"
    assert _cli("report", hosts["node-a"], "-o", str(alone)).returncode == 0
    assert "no trace of rank(s) 2-3" in alone.read_text(encoding="utf-8")
    out = _cli("compare", hosts["node-a"], hosts["node-a"], "--with-a", hosts["node-b"], "--with-b", hosts["node-b"])
    assert out.returncode == 0, out.stderr
    assert f"{hosts['node-a']} + {hosts['node-b']}" in out.stdout
    text = _cli("analyze", hosts["node-a"], hosts["node-b"]).stdout
    assert "Distributed (window 0, 4 of 4 ranks" in text and "node-b" in text


def test_run_name_is_the_profilers_on_every_host(hosts):
    assert [r.run for r in analyze_runs([hosts["node-a"], hosts["node-b"]])] == [RUN]
    assert os.path.basename(os.path.dirname(hosts["node-a"])) == "node-a"
