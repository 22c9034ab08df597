"""How a run's agent and its grader share the machine's GPUs (the GPU layout policy).

The policy, for ``tensor_parallel_size`` = *t* (GPUs the grader's vLLM splits one model over):

- **no GPU**: both run on the CPU (the grader with the transformers backend); nothing to split.
- **at most t GPUs** (one card, typically): the devices are *shared*. The grader's vLLM gets a
  fixed slice, :data:`SHARED_GRADER_FRACTION` of each card (less when the card is already
  partly used), and only while it evaluates; the agent is told to keep its own use under
  what is left, minus a margin (:data:`HEADROOM_FRACTION`), so that an evaluation starting
  mid-training still finds its slice. The transformers backend needs no reservation.
- **more than t GPUs** (8, typically): the grader gets the *last* t cards to itself and the
  agent the others (``cuda:0`` onwards, where training scripts look first), each whole.
  Runs on one node share the grader's cards through the per-device evaluation locks
  (:func:`agent2rl.grading.worker.device_lock_names`), so one evaluation runs per card.

``--grader-gpus`` / ``--agent-gpus`` override it with nvidia-smi indices (``0,1``, ``4-7``) or
``none`` (the CPU); naming one side only gives the other the remaining cards (all of them,
shared, when none remain). Overlapping lists share the overlap as above.

Devices are named to the children by UUID when known (``CUDA_VISIBLE_DEVICES=GPU-...``):
nvidia-smi's indices follow the PCI bus, CUDA's default order does not, and the UUID is also
what the evaluation locks are keyed by. :func:`plan_layout` is pure (a simulated device list
tests it); :func:`list_gpus` asks nvidia-smi, without initialising CUDA in this process.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from agent2rl.errors import UserError

#: the share of a shared card the grader's vLLM may take while it evaluates
SHARED_GRADER_FRACTION = 0.30
#: kept free on a shared card for the CUDA contexts and allocator slack of both sides
HEADROOM_FRACTION = 0.05
#: the least vLLM slice worth trying; below it the grader falls back to transformers
MIN_GRADER_FRACTION = 0.05
GIB = 2**30


@dataclass(frozen=True)
class Gpu:
    """One visible GPU: nvidia-smi's ``index``, its ``uuid`` (None when unknown), its name and
    its total and free memory in bytes (free as measured when the list was taken)."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    uuid: str | None = None


@dataclass(frozen=True)
class GpuLayout:
    """The decision of :func:`plan_layout`.

    ``grader`` and ``agent`` are the cards each side sees (empty: the CPU); ``shared`` the
    cards both see. ``grader_memory_fraction`` is the vLLM ``gpu_memory_utilization`` the
    grader should use (None: keep the user's; 0.0 on a shared card too full for any slice:
    use the transformers backend). ``agent_memory_bytes`` maps each shared card's index to
    the bytes the agent may use on it (its own cards are whole). ``notes`` say why.
    """

    grader: tuple[Gpu, ...]
    agent: tuple[Gpu, ...]
    grader_memory_fraction: float | None
    agent_memory_bytes: dict[int, int]
    notes: tuple[str, ...] = ()

    @property
    def shared(self) -> tuple[Gpu, ...]:
        ids = {g.index for g in self.agent}
        return tuple(g for g in self.grader if g.index in ids)

    def grader_env(self) -> dict[str, str]:
        """Environment for the grading service and its workers (the baseline included)."""
        return _visible(self.grader)

    def agent_env(self) -> dict[str, str]:
        """Environment for the agent: its cards, and on a shared card the bytes it may use
        (``AGENT2RL_GPU_MEMORY_BYTES``, the smallest over its shared cards)."""
        env = _visible(self.agent)
        if self.agent_memory_bytes:
            env["AGENT2RL_GPU_MEMORY_BYTES"] = str(min(self.agent_memory_bytes.values()))
        return env

    def summary(self) -> str:
        """One line for the console."""
        if not self.grader and not self.agent:
            return "GPUs: none (grader and agent on the CPU)"
        shared = f", shared: {_ids(self.shared)}" if self.shared else ""
        frac = (
            f", grader vLLM share {self.grader_memory_fraction:.2f}"
            if self.grader_memory_fraction is not None
            else ""
        )
        return f"GPUs: grader {_ids(self.grader)}, agent {_ids(self.agent)}{shared}{frac}"

    def instructions(self) -> str:
        """The section of the agent's instructions saying what GPU memory it may use."""
        lines = ["", "## GPUs", ""]
        if not self.agent:
            return "\n".join([*lines, "You have no GPU in this run: train on the CPU.", ""])
        cards = ", ".join(f"{g.name} ({g.total_bytes / GIB:.0f} GiB)" for g in self.agent)
        lines.append(f"You have {len(self.agent)} GPU(s) (`CUDA_VISIBLE_DEVICES` is set): {cards}.")
        if self.agent_memory_bytes:
            gib = min(self.agent_memory_bytes.values()) / GIB
            lines.append(
                f"The grader shares {'this card' if len(self.shared) == 1 else 'these cards'} "
                f"with you: keep your GPU memory under **{gib:.1f} GiB** per card (also in "
                "`$AGENT2RL_GPU_MEMORY_BYTES`), e.g. `torch.cuda.set_per_process_memory_"
                "fraction`; the grader needs the rest while it evaluates a submission, and "
                "an evaluation that runs out of memory fails."
            )
        else:
            lines.append("The grader has its own GPU(s): yours are whole.")
        return "\n".join(lines) + "\n"


def _ids(gpus: Sequence[Gpu]) -> str:
    return ",".join(str(g.index) for g in gpus) or "cpu"


def _visible(gpus: Sequence[Gpu]) -> dict[str, str]:
    # By UUID, else index; "" hides every card (the CPU); PCI_BUS_ID makes an index mean what
    # nvidia-smi means.
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(g.uuid or str(g.index) for g in gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def parse_gpu_list(text: str | None, flag: str, devices: Sequence[Gpu]) -> tuple[Gpu, ...] | None:
    """``--grader-gpus``/``--agent-gpus``: None or ``auto`` -> None (the policy decides),
    ``none``/``cpu`` -> () (the CPU), else indices and ranges (``0,2``, ``4-7``) of
    ``devices``. Raises :class:`UserError` for a malformed list or an index not present."""
    if text is None or text.strip().lower() in ("", "auto"):
        return None
    if text.strip().lower() in ("none", "cpu"):
        return ()
    by_index = {g.index: g for g in devices}
    picked: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            rng = range(int(lo), int(hi if sep else lo) + 1)
        except ValueError:
            raise UserError(
                f"bad {flag} {text!r}: give GPU indices as nvidia-smi shows them, e.g. 0,1 or "
                "4-7, or none"
            ) from None
        picked.extend(i for i in rng if i not in picked)
    missing = [i for i in picked if i not in by_index]
    if missing or not picked:
        have = ", ".join(str(i) for i in sorted(by_index)) or "none (no GPU here)"
        raise UserError(f"{flag} {text}: no GPU {missing or text} here; visible GPUs: {have}")
    return tuple(by_index[i] for i in sorted(picked))


def plan_layout(
    devices: Sequence[Gpu],
    grader_gpus: str | None = None,
    agent_gpus: str | None = None,
    tensor_parallel_size: int = 1,
    dedicated_fraction: float | None = None,
) -> GpuLayout:
    """Decide which cards the grader and the agent see (the policy in the module docstring).

    ``dedicated_fraction`` is the vLLM share on a card the grader has to itself (None: the
    user's ``--gpu-memory-utilization``), capped by that card's free memory. Raises
    :class:`UserError` when the grader has fewer cards than ``tensor_parallel_size`` needs.
    Pure: ``devices`` is as measured (or simulated); nothing is probed here.
    """
    devices = sorted(devices, key=lambda g: g.index)
    tp = max(1, tensor_parallel_size)
    grader = parse_gpu_list(grader_gpus, "--grader-gpus", devices)
    agent = parse_gpu_list(agent_gpus, "--agent-gpus", devices)
    notes: list[str] = []
    if grader is None and agent is None:
        if not devices:
            grader = agent = ()
        elif len(devices) <= tp:
            grader = agent = tuple(devices)
            notes.append(f"{len(devices)} GPU(s) for a grader of tensor parallel size {tp}: shared")
        else:
            grader, agent = tuple(devices[-tp:]), tuple(devices[:-tp])
    elif grader is None:
        rest = tuple(g for g in devices if g not in agent)
        grader = rest[-tp:] if len(rest) >= tp else tuple(devices[-tp:])
    elif agent is None:
        rest = tuple(g for g in devices if g not in grader)
        agent = rest or tuple(devices)
    if grader and len(grader) < tp:
        raise UserError(
            f"--tensor-parallel-size {tp} needs {tp} grader GPUs, --grader-gpus gives "
            f"{len(grader)}: name more, or lower --tensor-parallel-size"
        )
    shared_ids = {g.index for g in grader} & {g.index for g in agent}
    fraction: float | None = dedicated_fraction
    agent_bytes: dict[int, int] = {}
    # the least free share, less the headroom, of the cards the grader's vLLM allocates on
    free = min((g.free_bytes / g.total_bytes for g in grader[:tp] if g.total_bytes), default=1.0)
    free -= HEADROOM_FRACTION
    if shared_ids:
        # The grader's slice on a shared card, no more than is free now (another process
        # may hold part of it), and the agent's allowance what remains after the headroom.
        fraction = min(SHARED_GRADER_FRACTION, free)
        if fraction < MIN_GRADER_FRACTION:
            notes.append("shared GPU too full for a vLLM slice: the grader uses transformers")
            fraction = 0.0
        for g in grader:
            if g.index in shared_ids:
                reserve = int((fraction + HEADROOM_FRACTION) * g.total_bytes)
                agent_bytes[g.index] = max(0, g.free_bytes - reserve)
    elif grader and dedicated_fraction is not None and free < dedicated_fraction:
        notes.append(f"grader GPU partly in use: vLLM share lowered to {free:.2f}")
        fraction = free if free >= MIN_GRADER_FRACTION else 0.0
    return GpuLayout(tuple(grader), tuple(agent), fraction, agent_bytes, tuple(notes))


def nvidia_smi(query: str, timeout: float = 30.0) -> list[list[str]] | None:
    """The rows ``nvidia-smi QUERY --format=csv,noheader,nounits`` prints, each split into its
    stripped fields (``query`` e.g. ``--query-gpu=index,uuid``). The one place the harness
    asks nvidia-smi, which leaves CUDA uninitialised in this process (vLLM forks). None when
    nvidia-smi is not on PATH, fails or runs past ``timeout``; blank lines are dropped."""
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def list_gpus(env: dict[str, str] | None = None) -> list[Gpu]:
    """The GPUs this process may use (:func:`nvidia_smi`), filtered by
    ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs) when it is set. Empty when nvidia-smi is
    missing or fails. Edge case: MIG instances are not listed."""
    env = os.environ if env is None else env
    rows = nvidia_smi("--query-gpu=index,uuid,name,memory.total,memory.free")
    if rows is None:
        return []
    return parse_smi("\n".join(", ".join(r) for r in rows), env.get("CUDA_VISIBLE_DEVICES"))


def parse_smi(text: str, visible: str | None = None) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free
    --format=csv,noheader,nounits`` output (MiB); odd lines are skipped. ``visible``
    (``CUDA_VISIBLE_DEVICES``) keeps only the cards it names by index or UUID; "" keeps none."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            index, total, free = int(parts[0]), int(parts[3]), int(parts[4])
        except ValueError:
            continue
        gpus.append(Gpu(index, parts[2], total * 2**20, free * 2**20, parts[1] or None))
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        gpus = [g for g in gpus if str(g.index) in wanted or (g.uuid or "") in wanted]
    return gpus


@dataclass(frozen=True)
class GraderMemory:
    """The decision of :func:`size_grader_memory` for one submission's grading.

    ``kind``: the backend to grade with (``vllm`` or ``transformers``); ``fraction``: the vLLM
    ``gpu_memory_utilization`` to start it with (None for transformers); ``free_fraction``: the
    least free share over the grader's cards as measured; ``note``: why, when the run's
    setting was changed (empty otherwise).
    """

    kind: str
    fraction: float | None
    free_fraction: float
    note: str = ""


def size_grader_memory(
    devices: Sequence[Gpu], requested: float, kind: str = "auto"
) -> GraderMemory:
    """Size the grader's vLLM to the memory free *now* on ``devices`` (the cards its engine
    allocates on, measured just before it starts), the policy of the module docstring applied
    per submission: vLLM's share is the run's ``requested`` share, lowered to the least free
    share over the cards minus :data:`HEADROOM_FRACTION` (vLLM refuses to start when less
    than its share is free); under :data:`MIN_GRADER_FRACTION` the grader uses the
    transformers backend when the run's ``kind`` is ``auto``. With ``--backend vllm`` (the
    user's explicit word) it raises :class:`GpuMemoryBusy` instead, a harness failure the
    service retries like any other. ``devices`` empty: vLLM at ``requested`` (nothing to
    measure). Pure: the devices are as measured (or simulated)."""
    if not devices:
        return GraderMemory("vllm", requested, 1.0)
    free = min(g.free_bytes / g.total_bytes for g in devices if g.total_bytes > 0)
    fraction = min(requested, free - HEADROOM_FRACTION)
    if fraction >= requested:
        return GraderMemory("vllm", requested, free)
    cards = ", ".join(
        f"GPU {g.index} {g.free_bytes / GIB:.1f} of {g.total_bytes / GIB:.1f} GiB free"
        for g in devices
    )
    if fraction >= MIN_GRADER_FRACTION:
        return GraderMemory(
            "vllm",
            round(fraction, 4),
            free,
            f"{cards}: vLLM share lowered from {requested:.2f} to {fraction:.2f}",
        )
    if kind == "auto":
        return GraderMemory(
            "transformers", None, free, f"{cards}: too little for vLLM, graded with transformers"
        )
    raise GpuMemoryBusy(
        f"{cards}: too little free GPU memory for the grader's vLLM (at least "
        f"{MIN_GRADER_FRACTION + HEADROOM_FRACTION:.0%} of a card); free GPU memory, or run "
        "with --backend auto to grade with transformers meanwhile"
    )


class GpuMemoryBusy(RuntimeError):
    """Too little GPU memory is free for the grader's vLLM and the run forbids the fallback."""


def measure_grader_gpus(n: int, env: dict[str, str] | None = None) -> list[Gpu]:
    """The first ``n`` cards this process sees (``CUDA_VISIBLE_DEVICES`` order), with their
    free memory now: from nvidia-smi (:func:`list_gpus`; it leaves CUDA uninitialised here,
    which vLLM wants: it forks its workers), else from ``torch.cuda.mem_get_info`` when
    nvidia-smi is missing and CUDA is present. Empty without a GPU. Edge case: with MIG
    (nvidia-smi lists no instances) it falls back to torch."""
    env = os.environ if env is None else env
    gpus = list_gpus(env)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if gpus and visible:
        order = [v.strip() for v in visible.split(",") if v.strip()]

        def rank(g: Gpu) -> int:
            return next((i for i, v in enumerate(order) if v in (str(g.index), g.uuid)), len(order))

        gpus.sort(key=rank)
    if gpus:
        return gpus[:n]
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(min(n, torch.cuda.device_count())):
        free, total = torch.cuda.mem_get_info(i)
        out.append(Gpu(i, torch.cuda.get_device_name(i), int(total), int(free)))
    return out
