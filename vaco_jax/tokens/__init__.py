"""The token-level testbed: a small decoder-only transformer learning verifiable tasks from
stale generators, in one compiled program (tasks, model, warm start, training)."""
