"""The torch wing of the job layer: what the torch learners (``baselines_sb3``) need
from a run beyond the suite's own pieces."""
