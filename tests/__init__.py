"""The test suite, by area (see tests/README.md)."""
