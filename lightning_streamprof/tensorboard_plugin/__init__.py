"""The StreamProfiler tab of TensorBoard: ``tensorboard --logdir lightning_logs`` lists the runs' reports.

:mod:`.runs` finds the runs under the log directory, :mod:`.routes` serves them, :mod:`.plugin` is TensorBoard's
plugin, and ``static/`` the tab's page.
"""
