"""``profiler="streamprof"`` works with no import of ours, in both Lightning distributions and the CLI."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_python(code, *args, cwd=None):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_trainer_resolves_name_without_import(package):
    out = run_python(
        f"""
        import sys
        from {package} import Trainer
        assert "lightning_streamprof" not in sys.modules
        trainer = Trainer(profiler="StreamProf", logger=False, accelerator="cpu")
        print(type(trainer.profiler).__module__, type(trainer.profiler).__name__)
        """
    )
    assert out.split() == ["lightning_streamprof.profiling.profiler", "StreamProfiler"]


def test_other_names_keep_lightnings_behaviour():
    out = run_python(
        """
        from lightning.pytorch import Trainer
        from lightning.pytorch.utilities.exceptions import MisconfigurationException
        print(type(Trainer(profiler="simple", logger=False).profiler).__name__)
        try:
            Trainer(profiler="nope", logger=False)
        except MisconfigurationException as err:
            print("error:", err)
        """
    )
    first, second = out.strip().splitlines()
    assert first == "SimpleProfiler"
    assert second == ("error: Trainer(profiler='nope'): not a profiler name; it can be one of 'simple', 'advanced', "
                      "'pytorch', 'xla', 'streamprof'")


def test_a_typo_in_the_name_gets_the_closest_name():
    out = run_python(
        """
        from lightning.pytorch import Trainer
        try:
            Trainer(profiler="streamprofs", logger=False)
        except Exception as err:
            print(type(err).__name__, err)
        """
    )
    assert out.strip().splitlines()[-1].endswith("'xla', 'streamprof'; did you mean 'streamprof'?")
    assert out.startswith("MisconfigurationException Trainer(profiler='streamprofs'): not a profiler name")


def run_cli(*args):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(CLI_SCRIPT), *args, "--trainer.logger=false"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, line", [
    (["--trainer.profiler=streamprofs"],
     "error: --trainer.profiler: Trainer(profiler='streamprofs'): not a profiler name; it can be one of 'simple', "
     "'advanced', 'pytorch', 'xla', 'streamprof'; did you mean 'streamprof'?"),
    (["--trainer.profiler=lightning_streamprof.StreamProfiler", "--trainer.profiler.evry=50"],
     "error: --trainer.profiler.evry: StreamProfiler has no argument 'evry'; did you mean 'every'?"),
], ids=["name", "argument"])
def test_lightning_cli_typos_end_in_one_line(args, line):
    """A typo'd profiler name or argument through LightningCLI: one line on stderr, exit 2, no traceback, no usage."""
    proc = run_cli(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].endswith(line), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "usage:" not in proc.stderr


CLI_SCRIPT = """
import sys
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringModel
cli = LightningCLI(BoringModel, run=False, args=sys.argv[1:], save_config_callback=None)
p = cli.trainer.profiler
print(type(p).__name__, p.schedule.every, p.schedule.active)
"""


def test_lightning_cli_flag():
    out = run_python(CLI_SCRIPT, "--trainer.profiler=streamprof", "--trainer.logger=false")
    assert out.split()[0] == "StreamProfiler"


def test_lightning_cli_with_arguments():
    out = run_python(
        CLI_SCRIPT,
        "--trainer.profiler=lightning_streamprof.StreamProfiler",
        "--trainer.profiler.every=50",
        "--trainer.profiler.active=4",
        "--trainer.logger=false",
    )
    assert out.split() == ["StreamProfiler", "50", "4"]


def test_console_script():
    exe = shutil.which("streamprof", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    assert exe, "the streamprof console script is not installed"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("streamprof ")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "profiler='streamprof'" in out.stdout


CLI_WITH_IMPORT = """
import sys
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning_streamprof import StreamProfiler
cli = LightningCLI(BoringModel, run=False, args=sys.argv[1:], save_config_callback=None)
p = cli.trainer.profiler
print(isinstance(p, StreamProfiler), p.schedule.every, p.schedule.active)
"""


@pytest.mark.parametrize("name", ["streamprof", "StreamProfiler"])
def test_lightning_cli_short_name_with_arguments(name):
    """With StreamProfiler imported by the script, the short names take ``--trainer.profiler.<arg>=...``."""
    out = run_python(CLI_WITH_IMPORT, f"--trainer.profiler={name}", "--trainer.profiler.every=10",
                     "--trainer.profiler.active=4", "--trainer.logger=false")
    assert out.split() == ["True", "10", "4"]
