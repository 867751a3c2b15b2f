"""Running a testbed's program: the testbed registry (a run is testbed, config, hyper-parameters
and seed), the chunked driver with progress, checkpoints, signals and resume."""
