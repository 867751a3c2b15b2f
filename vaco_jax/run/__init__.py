"""Running a testbed's program: the chunked driver with progress, checkpoints, signals and
resume, several processes, memory checks and experiment trackers."""
