"""Package data of cl-suites (published results of the reference papers)."""
