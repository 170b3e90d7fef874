"""Tests of `cl-suites sweep` (Ray)."""
