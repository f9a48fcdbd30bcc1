"""Faust agents: each decodes, calls a pure core from `streams.core`, and sends."""
