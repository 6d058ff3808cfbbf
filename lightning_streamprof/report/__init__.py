"""Renderers: they only read results (:mod:`lightning_streamprof.results`), never traces."""
