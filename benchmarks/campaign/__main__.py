"""`python -m benchmarks.campaign`: the GPU campaign's command line (`gpu.main`)."""

import sys

from benchmarks.campaign.gpu import main

sys.exit(main())
