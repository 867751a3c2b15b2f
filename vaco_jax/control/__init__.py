"""The control testbed: MJX physics and pure-JAX tasks, a Gaussian actor-critic acting with
stale policies from the policy buffer, its algorithm registry and its trainer."""
