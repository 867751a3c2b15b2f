"""The GPU campaign and its lease tooling: what a short GPU lease measures, in steps of under
ten minutes (`gpu`: the steps in order, the plan, the runner, `--collect`; `steps`, `lease` and
`groups`: the steps), and the GPU lag study's slices carried to a lease and back (`study`: the
slices and their merge; `pack` and `records`: the packs and their validated reader). Run as
`python -m benchmarks.campaign`, or on the GPU machine `bash benchmarks/campaign/gpu_campaign.sh`.

Unlike the rest of `benchmarks/`, which uses the package's public API only, this tooling drives
the sweep machinery's run folders, locks and checkpoints directly: it packs a sweep's state on one
machine and continues it on another."""
