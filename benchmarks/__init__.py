"""Throughput, scaling, memory and compile-time measurements of vaco_jax (`benchmarks/run.py`)."""
