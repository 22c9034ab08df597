"""The rollout layer: task-neutral environment sessions for online RL.

::

    env.py      GameInfo, StepResult, Episode, GameSource: the interface a task implements
                (the grader's episode solver plays its private games through the same one)
    app.py      the rollout service: RolloutService (sessions, steps, limits; testable without
                HTTP) and create_app, its HTTP API behind a bearer token
    env_record.py  record/env.db: every session, step and search query the agent played
                (SQLite)
    client.py   a standard-library client, copied into the workspace as data/env_client.py

The service process itself (loading a run's task and serving its public games) is started by
:mod:`agent2rl.orchestration.rollout_service`.
"""

from agent2rl.rollout.app import RolloutLimits, RolloutService, create_app, describe_api
from agent2rl.rollout.env import (
    MAX_ACTION_CHARS,
    EnvironmentUnavailable,
    Episode,
    GameInfo,
    GameSource,
    SearchRecord,
    StepResult,
    check_action,
)
from agent2rl.rollout.env_record import EnvLedger, summarize_env

__all__ = [
    "MAX_ACTION_CHARS",
    "EnvLedger",
    "EnvironmentUnavailable",
    "Episode",
    "GameInfo",
    "GameSource",
    "RolloutLimits",
    "RolloutService",
    "SearchRecord",
    "StepResult",
    "check_action",
    "create_app",
    "describe_api",
    "summarize_env",
]
