"""Published results of CORA and MEAL as JSON (see cl_suites.metrics.published)."""
