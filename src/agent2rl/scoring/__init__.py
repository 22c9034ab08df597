"""Verifiers and judges shared by tasks."""

from agent2rl.scoring.math_answer import answers_match, extract_final_answer

__all__ = ["answers_match", "extract_final_answer"]
