"""The asynchronous core both testbeds plug into: the config and hyper-parameter bases, the
policy buffer and lag models, the trainer contract with its period loop, the optimisation
phase's epoch loop and the divergence freeze. It knows no testbed."""
