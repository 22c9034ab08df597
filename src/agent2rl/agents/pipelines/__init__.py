"""Agent pipelines that the paper-fidelity agent specs copy into the workspace."""
