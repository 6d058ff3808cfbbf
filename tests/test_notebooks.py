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
