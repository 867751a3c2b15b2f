"""vaco_jax: policy lag in asynchronous on-policy RL, end to end in JAX."""

__version__ = "0.1.0"
