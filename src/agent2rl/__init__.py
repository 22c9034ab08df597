"""agent2rl: a benchmark harness for LLM coding agents that engineer RL post-training.

The packages (the README's *Development* section shows the same map)::

    cli.py           the ``agent2rl`` command (Typer): run, report, compare, study, data, ...
    orchestration/   one run: resolve -> task data -> workspace -> baseline -> services ->
                     agent -> supervise -> finalize (RunContext shared by the stages)
    tasks/           one module or package per task, a declaration: dataset + solver + scorer
    dataset.py       Sample, PreparedTask (public / private / validation), JSONL splits
    solvers/         how samples become outputs: Generate, EpisodeSolver (multi-turn, tools)
    scoring/         how outputs are judged: FinalAnswer, UnitTests, EpisodeOutcome, judges
    inference/       generation backends (transformers; vLLM on GPUs) behind one interface
    grading/         the per-run grading service, its ledger (SQLite) and the evaluator
    rollout/         the task-neutral rollout service for interactive tasks (env.db)
    workspace/       the agent's workspace: data, base model, description, instructions
    sandbox/         bubblewrap, per-run uid, caps, network policy, program sandboxes
    agents/          agent specs (TOML), drivers, launch, log parsers, modes, reference agents
    metering/        the LLM metering proxy: per-provider usage, prices, SSE streams
    recording/       code snapshots (git) and the resource timeline
    integrity/       contamination and model-identity checks
    analysis/        RunMetrics, report, results.db, compare, and the study dashboard
    study/           many runs of a matrix on Ray, resumable
    models/          the built-in tiny model, local directories, hub ids
    files.py, formatting.py, locks.py, rundir.py, settings.py, errors.py: shared helpers

A run, as data flows through it::

    agent2rl run --task T --agent A --model M --budget B
      resolve_run        task (tasks.registry), agent spec, model, sandbox, caps: all checked
                         before runs/<id>/ exists, so a bad flag leaves nothing behind
      task data          Task.prepare -> public / private / validation in the task store
                         ($AGENT2RL_HOME/tasks/<name>/v<version>)
      workspace          runs/<id>/workspace: public data, base model (read-only), description
      baseline           grading.evaluator -> worker process -> Task.evaluate(solver, scorer)
                         on the private split; cached per (task, settings, model, backend)
      services           grading service (ledger.db), rollout service (env.db, L3), metering
                         proxy (LLM agents), service bridge and egress proxy (--network services)
      agent              under bubblewrap as its own uid, in its cgroup; code snapshots and
                         resources recorded; killed (whole tree) at the deadline or a cap
      finalize           integrity checks -> RunMetrics once -> report/ and runs/results.db
"""

from agent2rl.errors import UserError

__version__ = "0.1.0"
__all__ = ["UserError", "__version__"]
