"""Parts several tasks share; no task lives here, so task discovery does not import this
package as one (:data:`agent2rl.tasks.FRAMEWORK_MODULES`).

::

    interactive.py    InteractiveTask: what every level-3 task shares (episode solver,
                      protocol and rollout client in the workspace)
    protocol_core.py  the episode-protocol core (standard library only): shipped into the
                      workspace as data/protocol_core.py beside each L3 task's protocol.py
    opencompass.py    the prompts of the OpenCompass configs the paper grades gsm8k and
                      humaneval with
    public_view.py    --task-opt public=reference: the reference's public set for gsm8k and
                      humaneval
    bm25.py           BM25Index: the L3 tasks' BM25 search (bm25s, pyserini's parameters)
    store.py          a task's store set built aside and swapped in whole; is_built
"""
