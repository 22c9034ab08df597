"""``python -m agent2rl.metering``: the proxy process (see :mod:`agent2rl.metering.process`)."""

from agent2rl.metering.process import main

raise SystemExit(main())
