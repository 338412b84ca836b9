"""Adapters that put this project's memories behind an agent framework's own memory seam."""
