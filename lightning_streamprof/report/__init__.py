"""Renderers: they only read analysis results."""
