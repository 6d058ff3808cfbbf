"""Pure functions from an :class:`~lightning_streamprof.trace.EventTable` to frozen result dataclasses."""
