"""``agent2rl view``: a local, read-only web app over run and study directories.

It lists runs and studies with their live status, shows a study's slots, and a run's one
timeline (LLM exchanges from the metering proxy's transcript, code snapshots with diffs,
submissions with scores, rollout activity, the harness's events) with filters, search and
interactive charts (uPlot, bundled: nothing is fetched from the network). It reads only run
directories, never a live process, and never writes (see :mod:`agent2rl.viewer.data`).
"""

from agent2rl.viewer.app import create_app
from agent2rl.viewer.serve import serve_viewer

__all__ = ["create_app", "serve_viewer"]
