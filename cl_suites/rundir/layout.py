"""Where a run's directories go and which directories a run may use.

The rules ``cl-suites run`` applies before anything is written: the default directory of
a run (``runs/<suite>-<method>-s<seed>``, ``runs/<suite>-<method>-seeds`` for several
seeds), the directory of each seed of a several-seed run (``RUN_DIR/seed-<s>``), the
refusal of a directory a new run or a resume cannot use, and the request a resumed run
keeps in its ``metadata.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cl_suites.errors import RunDirConflictError
from cl_suites.rundir.runlock import LOCK_FILE
from cl_suites.rundir.runlog import METADATA_FILE, read_metadata


def method_label(method: str) -> str:
    """``method`` as a file name: an own method's ``package.module:Class`` as
    ``package.module.Class``."""
    return method.replace(":", ".")


def default_run_dir(suite_name: str, method: str, seed: int, several_seeds: bool) -> Path:
    """``runs/<suite_name>-<method>-s<seed>``, or ``runs/<suite_name>-<method>-seeds`` for a
    run of several seeds in one program (``suite_name``: the parsed id, e.g. ``MEAL-20``)."""
    name = f"runs/{suite_name}-{method_label(method)}"
    return Path(f"{name}-seeds" if several_seeds else f"{name}-s{seed}")


def seed_run_dirs(run_dir: Path, seeds: Sequence[int]) -> list[Path]:
    """The run directories of a several-seed run: ``run_dir/seed-<s>`` per seed."""
    return [Path(run_dir) / f"seed-{int(s)}" for s in seeds]


def run_dirs(run_dir: Path, seeds: Sequence[int] | None) -> list[Path]:
    """The run directories a run writes: ``run_dir``, or ``run_dir/seed-<s>`` per seed of
    a several-seed run (``seeds`` not ``None``)."""
    return [Path(run_dir)] if seeds is None else seed_run_dirs(run_dir, seeds)


def holds_run(run_dir: Path) -> bool:
    """``run_dir`` holds a started run (its ``metadata.json``)."""
    return (Path(run_dir) / METADATA_FILE).exists()


def check_run_dir(run_dir: Path, resume: bool) -> None:
    """Refuse, before anything is written, a run directory the run cannot use."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirConflictError(f"--run-dir {run_dir} is a file, not a directory")
    entries = []
    if run_dir.is_dir():
        entries = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE)
    has_run = holds_run(run_dir)
    if resume:
        if not run_dir.exists():
            raise RunDirConflictError(f"cannot resume {run_dir}: the directory does not exist")
        if not entries:
            raise RunDirConflictError(
                f"cannot resume {run_dir}: the directory is empty (no run to continue); "
                "drop --resume to start a new run there"
            )
        if not has_run:
            shown = ", ".join(entries[:5]) + (" ..." if len(entries) > 5 else "")
            raise RunDirConflictError(
                f"cannot resume {run_dir}: it is not a cl-suites run directory (no "
                f"{METADATA_FILE}; it holds {shown})"
            )
        metadata = read_metadata(run_dir)
        if not isinstance(metadata, dict) or "suite_id" not in metadata:
            raise RunDirConflictError(
                f"cannot resume {run_dir}: its {METADATA_FILE} is not a cl-suites run's "
                "(no suite_id)"
            )
        return
    if has_run:
        raise RunDirConflictError(
            f"run directory {run_dir} already holds a run; add --resume to continue it or "
            "choose another --run-dir"
        )
    if entries:
        raise RunDirConflictError(
            f"refusing to start a run in {run_dir}: the directory is not empty and holds no "
            "cl-suites run; choose another --run-dir"
        )


def check_run_dirs(dirs: list[Path], resume: bool) -> None:
    """:func:`check_run_dir` for every directory of a run; resuming several seeds needs one
    of them to hold a run (a kill while the first files were written may leave the others
    unstarted: they start over with the rest)."""
    started = [d for d in dirs if holds_run(d)]
    if not resume or not started:
        for run_dir in dirs:
            check_run_dir(run_dir, resume)
        return
    for run_dir in dirs:
        check_run_dir(run_dir, run_dir in started)


def stored_request(run_dir: Path, suite_given: bool, run_keys: Sequence[str]) -> dict[str, Any]:
    """The run keys and options of the run in ``run_dir`` that ``--resume`` continues, from
    its ``metadata.json``, or, for a several-seed run's directory, from its seeds' (with
    ``seeds``: every ``seed-<s>`` directory in it). ``{}`` when it holds no run yet;
    without ``suite_given``, a directory with nothing to resume is refused, saying why.
    ``run_keys``: the run keys ``metadata.json`` holds at its top level
    (``cl_suites.request.METADATA_RUN_KEYS``); the suite is taken as its ``suite_id``."""
    run_dir = Path(run_dir)
    if not (run_dir / METADATA_FILE).is_file():
        seeds = seeds_in(run_dir)
        started = [s for s in seeds if holds_run(run_dir / f"seed-{s}")]
        if started:
            return _stored_seeds(run_dir, seeds, started, run_keys)
        if not suite_given:
            check_run_dir(run_dir, resume=True)  # says why there is nothing to resume
        return {}
    return _stored(run_dir, run_keys)


def seeds_in(run_dir: Path) -> list[int]:
    """The seeds of the ``seed-<s>`` directories in ``run_dir`` (a several-seed run's), in
    ascending order (``[]`` for any other directory)."""
    if not run_dir.is_dir():
        return []
    names = (p.name.removeprefix("seed-") for p in run_dir.iterdir() if p.is_dir())
    return sorted(int(n) for n in names if n.isdigit() and str(int(n)) == n)


def _stored(run_dir: Path, run_keys: Sequence[str]) -> dict[str, Any]:
    try:
        metadata = read_metadata(run_dir)
    except Exception:  # an unreadable file is refused with its own message later
        return {}
    if not isinstance(metadata, dict) or "suite_id" not in metadata:
        return {}
    keys = {k: metadata[k] for k in run_keys if k in metadata}
    request = metadata.get("request") or {}
    return {**dict(request.get("overrides") or {}), **keys, "suite": metadata["suite_id"]}


def _stored_seeds(
    run_dir: Path, seeds: list[int], started: list[int], run_keys: Sequence[str]
) -> dict[str, Any]:
    """The request of a several-seed run from the seeds that started (they agree on
    everything but the seed; a seed killed before its first file starts over)."""
    first, *others = [(s, _stored(run_dir / f"seed-{s}", run_keys)) for s in started]
    request = {k: v for k, v in first[1].items() if k != "seed"}
    for seed, stored in others:
        mine = {k: v for k, v in stored.items() if k != "seed"}
        if mine != request:
            key = next(k for k in sorted({*mine, *request}) if mine.get(k) != request.get(k))
            raise RunDirConflictError(
                f"cannot resume {run_dir}: its seed runs disagree on {key!r} "
                f"(seed-{first[0]}: {request.get(key)!r}, seed-{seed}: {mine.get(key)!r}); "
                "resume each seed directory on its own"
            )
    return {**request, "seeds": seeds}
