"""A run directory on disk: where runs go, what they hold, how they are written."""
