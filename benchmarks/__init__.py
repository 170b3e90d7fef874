"""Benchmarks and tooling around cl-suites, by purpose (run from the repository root as
modules, e.g. ``python -m benchmarks.speed.bench_procgen``; ``README.md`` lists them):
``speed`` (how fast), ``parity`` (the same values as CORA's and MEAL's reference code),
``learning`` (long learning runs), ``report`` (the HTML report's build), ``device`` (the
prepared GPU check), ``install`` (each extra alone in a fresh venv), ``structure`` (the
code's own shape). Not part of the installed package."""
