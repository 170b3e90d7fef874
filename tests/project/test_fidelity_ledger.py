"""The fidelity ledger (docs/fidelity.md) is complete: every row names a test that pins it,
and the defaults it states are the code's.

Defaults that cannot drift: a row's "ours (default)" cell may carry **default keys**, code
spans of the form `` `KEY = VALUE` `` where ``VALUE`` is a Python literal and ``KEY`` is

* a preset table entry, rooted at ``presets`` (``presets.CORA_VTRACE["gamma"]``), or the
  result of a function of ``hyperparameters`` (``hyperparameters.preset_settings("MiniHack15",
  "vtrace", "ft", "paper")["learner"]["normalize_reward"]``; only literal arguments and
  indices);
* a constructor default, ``Class.param``: ``VTrace.reward_std_count`` is the default of
  ``VTrace(reward_std_count=...)`` (classes of ``baselines_sb3.learners``,
  ``baselines_sb3.cl``, ``baselines_sb3.policies``, ``baselines_sb3.cl.unroll_buffer``,
  ``cl_suites.remedies``: ``RemedyConfig.redo_tau``, ``baselines_jax.config``:
  ``IPPOConfig.agem_memory_size``, and ``baselines_jax.mappo``: ``MAPPOConfig.lr_end``).

``test_default_keys_match_the_code`` resolves every key and compares it with the value the
row states, so a changed default without a ledger change fails. Keys are optional in
general (other sections' rows still parse), but required in the CORA learner, method and
preset sections, where every row has one unless ``UNKEYED`` names it with the reason.
"""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

from tests.helpers import REPO

ROOT = REPO
LEDGER = ROOT / "docs" / "fidelity.md"
COLUMNS = (
    "setting",
    "reference code",
    "paper",
    "ours (default)",
    "options",
    "why",
    "pinned by",
)
_TEST_REF = re.compile(r"`?(tests/[\w/]+\.py)::(\w+)`?")


def ledger_rows() -> list[tuple[str, dict[str, str]]]:
    """(section, row) for every data row of every ledger table with the standard columns."""
    rows: list[tuple[str, dict[str, str]]] = []
    section, header = "", None
    for line in LEDGER.read_text().splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = tuple(c.lower() for c in cells)
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue  # the separator row
        if header == COLUMNS:
            rows.append((section, dict(zip(COLUMNS, cells, strict=False))))
    return rows


def test_every_row_is_pinned_by_an_existing_test():
    problems = []
    for section, row in ledger_rows():
        refs = _TEST_REF.findall(row.get("pinned by", ""))
        if not refs:
            problems.append(f"{section} / {row['setting']}: no test named in 'pinned by'")
        for path, name in refs:
            file = ROOT / path
            if not file.exists():
                problems.append(f"{section} / {row['setting']}: {path} does not exist")
            elif not re.search(rf"^\s*(async )?def {name}\(", file.read_text(), re.M):
                problems.append(f"{section} / {row['setting']}: {path} has no test {name}")
    assert not problems, "\n".join(problems)


def test_rows_have_every_column_filled():
    empty = [
        f"{section} / {row['setting']}: empty {column!r}"
        for section, row in ledger_rows()
        for column in COLUMNS
        if not row.get(column)
    ]
    assert not empty, "\n".join(empty)


# -- default keys -----------------------------------------------------------------------------
_KEYED = re.compile(r"`([^`=]+?)\s*=\s*([^`]+)`")
KEYED_SECTIONS = (
    "CORA learners (IMPALA / V-trace, PPO)",
    "CORA continual-learning methods (EWC, online EWC, L2, MAS, P&C, CLEAR)",
    "CORA presets per suite (Atari6, Procgen6, MiniHack15, CHORES)",
    "Plasticity remedies",
)
UNKEYED = {
    "default learner": "a catalog field (SuiteInfo.default_learner), not a preset value",
    "evaluation policy": "a job option (main_job reads eval_deterministic, default True)",
    "previous inputs at starts": "behaviour of the wrapper at resets and switches (a test)",
    "previous inputs in evaluation": "behaviour of the evaluator (a test)",
    "V-trace truncation": "keyed through VTrace below; rho/c of vtrace_targets are arguments",
    "action masks": "behaviour of the policy's masking (a test)",
    "unsupported options": "behaviour (an error), no value",
    "EWC consolidation time": "a point in time of the training loop (a test)",
    "Fisher buffer": "buffer behaviour; its size is keyed in 'EWC strength and parameters'",
    "EWC tasks": "a data structure and a reduction (a test)",
    'Fisher normalisation "row"': "arithmetic of normalize_importance (a test)",
    "P&C adapters": "an architecture (a test)",
    "P&C distillation": "a loss (a test)",
    "P&C KB Fisher": "a point in time of the training loop (a test)",
    "P&C evaluation": "behaviour of evaluation_mode (a test)",
    "Procgen6 network": "an architecture; the preset key is keyed in 'Atari6 learner'",
    "CLEAR replayed rewards": "behaviour of the normaliser on replay (a test)",
    "P&C bootstrap after the reset": "behaviour of the update after a reset (a test)",
    "V-trace update (whole)": "a whole update against CORA's code (the parity pins)",
    "CL updates (whole)": "whole updates against CORA's code (the parity pins)",
    "remedy on a method (`--method redo`, `ewc+redo`)": "a naming rule (a test)",
    "ReDo score and re-draw": "arithmetic against Plasticine's code (the parity pins)",
    "ReDo: which layers, which outgoing weights": "an architecture walk (a test)",
    "continual backprop: generate and test": "an algorithm against GnT (the parity pins)",
    "plasticity injection": "keyed through injection_at; the rest is an equivalence (a test)",
    "remedies and the task's end, random numbers, `remedy.csv`": "behaviour (a test)",
    "CReLU": "an architecture (a test)",
    "`ppo-jax`: the same remedies as the torch learners": "equality with torch (a test)",
    "`ppo-jax`: Adam's step count under injection": "an optimizer property (a test)",
    "`ppo-jax`: random keys of a remedy": "a key schedule (a test)",
}
"""Rows of ``KEYED_SECTIONS`` without default keys, with the reason."""


def _namespace() -> dict[str, Any]:
    from baselines_jax import config as jax_config
    from baselines_jax import mappo as jax_mappo
    from baselines_sb3 import cl, learners, policies
    from baselines_sb3.cl import unroll_buffer
    from cl_suites import remedies
    from cl_suites.job import hyperparameters, presets

    names: dict[str, Any] = {"presets": presets, "hyperparameters": hyperparameters}
    for module in (learners, cl, policies, unroll_buffer, remedies, jax_config, jax_mappo):
        names.update({k: v for k, v in vars(module).items() if inspect.isclass(v)})
    return names


def resolve_key(key: str) -> Any:
    """The value of a default key (see the module docstring); ``KeyError``/``ValueError``
    when it names nothing."""
    names = _namespace()

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Name):
            return names[node.id]
        if isinstance(node, ast.Attribute):
            owner = value(node.value)
            if inspect.isclass(owner):
                params = inspect.signature(owner).parameters
                if node.attr not in params or params[node.attr].default is inspect._empty:
                    raise KeyError(f"{owner.__name__} has no default for {node.attr!r}")
                return params[node.attr].default
            if owner is names["presets"] or owner is names["hyperparameters"]:
                return getattr(owner, node.attr)
            raise ValueError(f"attribute of {owner!r}")
        if isinstance(node, ast.Subscript):
            return value(node.value)[ast.literal_eval(node.slice)]
        if isinstance(node, ast.Call):
            func = value(node.func)
            if getattr(func, "__module__", "") != "cl_suites.job.hyperparameters":
                raise ValueError(f"only preset functions may be called, not {func!r}")
            args = [ast.literal_eval(a) for a in node.args]
            return func(*args, **{k.arg: ast.literal_eval(k.value) for k in node.keywords})
        raise ValueError(f"unsupported key syntax: {ast.dump(node)}")

    return value(ast.parse(key.strip(), mode="eval").body)


def default_keys(row: dict[str, str]) -> list[tuple[str, str]]:
    """``(key, value)`` of the row's default keys: code spans ``KEY = VALUE`` whose key
    is rooted at ``presets`` or ``hyperparameters`` or is ``Class.param`` of a class of the
    namespace (other code, such as `` `lr_schedule="constant"` `` or
    `` `TimeLimit.truncated = False` ``, is text)."""
    classes = _namespace()
    keys = []
    for key, literal in _KEYED.findall(row.get("ours (default)", "")):
        key = key.strip()
        plain = re.fullmatch(r"([A-Z]\w*)\.\w+", key)
        rooted = key.startswith(("presets.", "hyperparameters."))
        if rooted or (plain and plain.group(1) in classes):
            keys.append((key, literal.strip()))
    return keys


def test_default_keys_match_the_code():
    problems, checked = [], 0
    for section, row in ledger_rows():
        for key, literal in default_keys(row):
            where = f"{section} / {row['setting']}: `{key} = {literal}`"
            try:
                stated = ast.literal_eval(literal)
            except (ValueError, SyntaxError):
                problems.append(f"{where}: the value is not a Python literal")
                continue
            try:
                actual = resolve_key(key)
            except (KeyError, ValueError, AttributeError, IndexError, TypeError) as exc:
                problems.append(f"{where}: the key names nothing ({exc})")
                continue
            checked += 1
            if actual != stated or (
                type(actual) is not type(stated)
                and not (isinstance(actual, int | float) and isinstance(stated, int | float))
            ):
                problems.append(f"{where}: the code's default is {actual!r}")
    assert not problems, "\n".join(problems)
    assert checked >= 40  # the CORA sections alone hold more


def test_cora_rows_carry_default_keys():
    rows = [(s, r) for s, r in ledger_rows() if s in KEYED_SECTIONS]
    assert {s for s, _ in rows} == set(KEYED_SECTIONS)  # a renamed section fails here
    missing = [
        f"{section} / {row['setting']}"
        for section, row in rows
        if not default_keys(row) and row["setting"] not in UNKEYED
    ]
    assert not missing, "rows without a default key (add one, or list it in UNKEYED):\n" + (
        "\n".join(missing)
    )
    stale = set(UNKEYED) - {row["setting"] for _, row in rows}
    assert not stale, f"UNKEYED names rows that do not exist: {stale}"


def test_a_drifted_default_fails_the_key_check():
    """The check can fail: a stated value that differs from the code's is reported."""
    from cl_suites.job import presets

    row = {"ours (default)": '`presets.CORA_VTRACE["gamma"] = 0.9` and `VTrace.n_steps = 20`'}
    keys = dict(default_keys(row))
    assert resolve_key('presets.CORA_VTRACE["gamma"]') == presets.CORA_VTRACE["gamma"] != 0.9
    assert resolve_key("VTrace.n_steps") == ast.literal_eval(keys["VTrace.n_steps"])
    minihack = 'hyperparameters.preset_settings("MiniHack15", "vtrace", "ft", "paper")["num_envs"]'
    assert resolve_key(minihack) == 32
    for bad in ("VTrace.no_such_arg", "presets.NOPE", "open('x')"):
        try:
            resolve_key(bad)
        except (KeyError, ValueError, AttributeError):
            continue
        raise AssertionError(f"{bad} resolved")
