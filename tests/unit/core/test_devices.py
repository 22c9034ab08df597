"""The GPU layout policy on simulated device lists (0, 1 and 8 cards), on the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent2rl.devices import (
    HEADROOM_FRACTION,
    SHARED_GRADER_FRACTION,
    Gpu,
    list_gpus,
    parse_gpu_list,
    parse_smi,
    plan_layout,
)
from agent2rl.errors import UserError

GIB = 2**30


def cards(n: int, total_gib: int = 80, free_gib: int | None = None) -> list[Gpu]:
    free = total_gib if free_gib is None else free_gib
    return [Gpu(i, "H100", total_gib * GIB, free * GIB, f"GPU-{i:04d}") for i in range(n)]


def test_no_gpu_both_on_cpu() -> None:
    layout = plan_layout([])
    assert layout.grader == layout.agent == ()
    assert layout.grader_env()["CUDA_VISIBLE_DEVICES"] == ""
    assert layout.agent_env()["CUDA_VISIBLE_DEVICES"] == ""
    assert "no GPU" in layout.instructions()


def test_one_card_is_shared_with_a_fixed_grader_slice() -> None:
    layout = plan_layout(cards(1), dedicated_fraction=0.85)
    assert [g.index for g in layout.grader] == [g.index for g in layout.agent] == [0]
    assert [g.index for g in layout.shared] == [0]
    assert layout.grader_memory_fraction == SHARED_GRADER_FRACTION  # not the dedicated 0.85
    allowed = layout.agent_memory_bytes[0]
    assert allowed == int(80 * GIB - (SHARED_GRADER_FRACTION + HEADROOM_FRACTION) * 80 * GIB)
    # grader slice + headroom + agent allowance fit in the card
    assert allowed + (SHARED_GRADER_FRACTION + HEADROOM_FRACTION) * 80 * GIB <= 80 * GIB
    assert layout.agent_env()["AGENT2RL_GPU_MEMORY_BYTES"] == str(allowed)
    assert layout.agent_env()["CUDA_VISIBLE_DEVICES"] == "GPU-0000"
    assert f"{allowed / GIB:.1f} GiB" in layout.instructions()


def test_one_card_partly_used_gets_a_smaller_slice_or_transformers() -> None:
    half = plan_layout(cards(1, free_gib=20))  # 25% free: 20% slice, agent keeps ~0
    assert half.grader_memory_fraction == pytest.approx(0.25 - HEADROOM_FRACTION)
    assert half.agent_memory_bytes[0] == 0
    full = plan_layout(cards(1, free_gib=4))  # 5% free: no slice worth trying
    assert full.grader_memory_fraction == 0.0
    assert any("transformers" in n for n in full.notes)


def test_eight_cards_grader_gets_the_last_agent_the_rest_whole() -> None:
    layout = plan_layout(cards(8), dedicated_fraction=0.85)
    assert [g.index for g in layout.grader] == [7]
    assert [g.index for g in layout.agent] == list(range(7))
    assert layout.shared == () and layout.agent_memory_bytes == {}
    assert layout.grader_memory_fraction == 0.85
    assert layout.grader_env()["CUDA_VISIBLE_DEVICES"] == "GPU-0007"
    assert "AGENT2RL_GPU_MEMORY_BYTES" not in layout.agent_env()
    assert "yours are whole" in layout.instructions()


def test_eight_cards_tensor_parallel_grader() -> None:
    layout = plan_layout(cards(8), tensor_parallel_size=2)
    assert [g.index for g in layout.grader] == [6, 7]
    assert [g.index for g in layout.agent] == list(range(6))


def test_two_cards_with_tp2_are_shared() -> None:
    layout = plan_layout(cards(2), tensor_parallel_size=2)
    assert [g.index for g in layout.shared] == [0, 1]


def test_flags_override_and_the_other_side_gets_the_rest() -> None:
    layout = plan_layout(cards(8), grader_gpus="0", agent_gpus=None)
    assert [g.index for g in layout.grader] == [0]
    assert [g.index for g in layout.agent] == list(range(1, 8))
    layout = plan_layout(cards(8), agent_gpus="0-3")
    assert [g.index for g in layout.agent] == [0, 1, 2, 3]
    assert [g.index for g in layout.grader] == [7]
    layout = plan_layout(cards(1), grader_gpus="none")
    assert layout.grader == () and [g.index for g in layout.agent] == [0]
    assert layout.agent_memory_bytes == {}  # the grader is on the CPU: the card is whole
    layout = plan_layout(cards(1), grader_gpus="0")  # nothing left: shared
    assert [g.index for g in layout.shared] == [0]
    layout = plan_layout(cards(4), grader_gpus="2", agent_gpus="1,2")
    assert [g.index for g in layout.shared] == [2] and 2 in layout.agent_memory_bytes


def test_dedicated_grader_card_partly_used_lowers_the_share() -> None:
    layout = plan_layout(cards(2, free_gib=40), dedicated_fraction=0.85)
    assert layout.grader_memory_fraction == pytest.approx(0.5 - HEADROOM_FRACTION)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9", "no GPU [9] here"),
        ("a,b", "bad --grader-gpus"),
        ("1-x", "bad --grader-gpus"),
    ],
)
def test_bad_gpu_lists_are_user_errors(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_gpu_list(text, "--grader-gpus", cards(2))


def test_gpu_named_on_a_cpu_machine_is_a_user_error() -> None:
    with pytest.raises(UserError, match="no GPU here"):
        plan_layout([], grader_gpus="0")


def test_tensor_parallel_larger_than_grader_gpus_is_a_user_error() -> None:
    with pytest.raises(UserError, match="--tensor-parallel-size 2 needs 2"):
        plan_layout(cards(8), grader_gpus="7", tensor_parallel_size=2)


SMI = """0, GPU-aaa, NVIDIA H100 80GB HBM3, 81559, 80000
1, GPU-bbb, NVIDIA H100 80GB HBM3, 81559, 1000
garbage line
"""


def test_parse_smi_reads_memory_and_honours_cuda_visible_devices() -> None:
    gpus = parse_smi(SMI)
    assert [(g.index, g.uuid) for g in gpus] == [(0, "GPU-aaa"), (1, "GPU-bbb")]
    assert gpus[1].free_bytes == 1000 * 2**20 and gpus[0].total_bytes == 81559 * 2**20
    assert [g.index for g in parse_smi(SMI, "1")] == [1]
    assert [g.index for g in parse_smi(SMI, "GPU-aaa")] == [0]
    assert parse_smi(SMI, "") == []


def test_list_gpus_matches_this_machine() -> None:
    # nvidia-smi is absent on a CPU machine: an empty list, never an error
    gpus = list_gpus()
    assert all(g.total_bytes >= g.free_bytes >= 0 for g in gpus)


def _fake_smi(tmp_path: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``nvidia-smi`` executable first on PATH, running ``script`` (sh)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_nvidia_smi_is_read_in_one_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent2rl.devices import nvidia_smi
    from agent2rl.grading.worker import gpu_uuids

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert nvidia_smi("--query-gpu=index") is None and gpu_uuids() == {} and list_gpus() == []
    _fake_smi(
        tmp_path,
        'case "$1" in --query-gpu=index,uuid) printf "0, GPU-a\\n\\n1, GPU-b\\n";;\n'
        '*) printf "0, GPU-a, H200, 143771, 140000\\n";; esac\n',
        monkeypatch,
    )
    assert nvidia_smi("--query-gpu=index,uuid") == [["0", "GPU-a"], ["1", "GPU-b"]]
    assert gpu_uuids() == {"0": "GPU-a", "1": "GPU-b"}
    (gpu,) = list_gpus({})
    assert (gpu.index, gpu.name, gpu.uuid, gpu.total_bytes) == (0, "H200", "GPU-a", 143771 * 2**20)
    (tmp_path / "bin" / "nvidia-smi").write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n"
    )
    assert nvidia_smi("--query-gpu=index") is None and list_gpus({}) == []
