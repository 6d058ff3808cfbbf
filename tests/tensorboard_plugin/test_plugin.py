import subprocess
import sys
from importlib.metadata import entry_points

from logdirs import make_run
from tensorboard.plugins import base_plugin

from lightning_streamprof.tensorboard_plugin.plugin import StreamProfilerPlugin


def test_tensorboard_finds_the_plugin_through_its_entry_point():
    (found,) = [e for e in entry_points(group="tensorboard_plugins") if e.name == "streamprof"]
    assert found.load() is StreamProfilerPlugin


def test_active_only_with_a_run_and_its_module_is_a_route(tmp_path):
    plugin = StreamProfilerPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert plugin.is_active() is False
    make_run(tmp_path)
    plugin = StreamProfilerPlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert plugin.is_active() is True
    meta = plugin.frontend_metadata()
    assert meta.es_module_path in plugin.get_plugin_apps()
    assert (plugin.plugin_name, meta.tab_name) == ("streamprof", "StreamProfiler")


def test_loading_the_plugin_imports_neither_torch_nor_lightning():
    code = ("import sys\nimport lightning_streamprof.tensorboard_plugin.plugin\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'pytorch_lightning'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
