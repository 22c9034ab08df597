"""Orchestration: one run from request to report (``agent2rl run``).

::

    request.py          RunRequest: the one run request (CLI, Python API, studies)
    context.py          RunContext (what the stages share), RunOutcome
    run.py              execute_run: resolve, prepare, workspace, baseline, services, agent,
                        supervise, finalize
    services.py         the run's services under one lifecycle: started in order, stopped
                        in reverse on every exit path (one ExitStack)
    baseline.py         the base model's score, cached across runs
    agent_process.py    the agent's process tree: launch it, kill all of it
    guard.py            the run's guard process: kills what a SIGKILLed harness leaves
    recover.py          closes a run whose harness died (agent2rl report)
    infra.py            which agent_error runs failed because of their infrastructure
    rollout_service.py  the rollout service process of interactive runs
    watchdog.py         caps the kernel does not enforce (disk quota, RSS fallback)
    status.py           the live status line
"""
