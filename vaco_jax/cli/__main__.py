from vaco_jax.cli import entry

entry()
