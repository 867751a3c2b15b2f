import sys

from vaco_jax.cli import main

sys.exit(main())
