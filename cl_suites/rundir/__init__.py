"""The run directory: everything a run writes and reads back on disk.

``runlog`` (the run log: ``metadata.json``, ``eval.csv``, ``episodes.csv``,
``plasticity.csv`` and their readers), ``checkpoint_files`` (checkpoint files with their
checksums; imports torch), ``runlock`` (the run directory's lock), ``fsutil`` (atomic
writes, disk-full errors, the sizes of files), ``progress`` (the rich progress bar and
``progress.json``) and ``layout`` (where runs go: default and per-seed directories, which
directory a new run or a resume may use).

The package is the bottom of the stack beside ``cl_suites.errors``: it imports nothing
else of the project (the env machinery of ``cl_suites.core`` only in type annotations),
so every layer above can write through it; core itself only names ``RunLog`` in its
annotations, as it imports no torch.
"""
