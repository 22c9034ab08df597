"""``python -m agent2rl.metering``: the proxy process (see :mod:`agent2rl.metering.process`)."""

import sys

from agent2rl.metering.process import main

sys.exit(main())
