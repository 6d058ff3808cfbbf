import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = os.path.join(os.path.dirname(HERE), "notebooks")


def test_notebook_code_cells_run(monkeypatch, capsys):
    monkeypatch.chdir(NOTEBOOKS)
    for name in sorted(os.listdir(NOTEBOOKS)):
        if not name.endswith(".ipynb"):
            continue
        with open(name) as f:
            cells = json.load(f)["cells"]
        namespace: dict = {}
        for cell in cells:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), f"{name} cell", "exec"), namespace)
    assert "GPU utilization" in capsys.readouterr().out


def test_walkthrough_keeps_its_outputs():
    """The walkthrough is saved with what it printed and its chart, so it reads well without running it."""
    with open(os.path.join(NOTEBOOKS, "walkthrough.ipynb")) as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in cells)
    charts = [o for c in cells for o in c["outputs"] if "image/svg+xml" in o.get("data", {})]
    assert charts and "<rect" in "".join(charts[0]["data"]["image/svg+xml"])
