"""Recording what the agent did: code snapshots (git) and a resource timeline of its processes."""

from agent2rl.recording.resources import ResourceSampler
from agent2rl.recording.snapshot import CodeRecorder, PeriodicSnapshotter

__all__ = ["CodeRecorder", "PeriodicSnapshotter", "ResourceSampler"]
