"""The long-term memory pipeline: flush (facts out of conversations) and maintenance."""
