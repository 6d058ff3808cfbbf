"""The TensorBoard plugin: the "StreamProfiler" tab, found by TensorBoard through the ``tensorboard_plugins``
entry point of this package."""

from __future__ import annotations

from collections.abc import Callable

from tensorboard.plugins import base_plugin

from lightning_streamprof.tensorboard_plugin.routes import apps, listing
from lightning_streamprof.tensorboard_plugin.runs import RunIndex

PLUGIN_NAME = "streamprof"


class StreamProfilerPlugin(base_plugin.TBPlugin):
    """Lists the StreamProfiler runs under ``--logdir`` and shows each run's report, its windows, the straggler
    view of a multi-rank run and its traces to download. Active when the log directory holds a run."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._index = RunIndex(context.logdir or "")

    def get_plugin_apps(self) -> dict[str, Callable]:
        return apps(self._index)

    def is_active(self) -> bool:
        return bool(listing(self._index)["runs"])

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="StreamProfiler",
                                            disable_reload=True)
