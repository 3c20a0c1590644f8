"""sglpatch: carry an ordered patch series on top of a pinned sglang release."""

__version__ = "0.1.0"
