"""Learning runs: the suites' learning curves and the paired CORA runs."""
