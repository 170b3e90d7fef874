"""The entries of the stable-baselines3/torch learners (``ppo``, ``vtrace``).

:class:`TorchLearner` is a ``cl_suites.job.learners.LearnerEntry``: what the job needs of
``baselines_sb3``'s ``ContinualPPO`` (``ppo``) and ``VTrace`` (``vtrace``), built by
``baselines_sb3.factory.build_model`` and trained by this wing's job
(``cl_suites.job.torch.train``). This module imports no torch: the options
(``cl_suites.job.torch.options``), the device (``cl_suites.job.torch.device``) and the
job are imported when a torch run asks for them, so loading the entry to list or resolve
another learner's run costs nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cl_suites.declarations import TORCH_METHODS, is_builtin_method, is_plugin_spec
from cl_suites.errors import BadValueError
from cl_suites.job import hyperparameters
from cl_suites.job.hyperparameters import Values
from cl_suites.remedies import OPTION_NAMES as REMEDY_OPTIONS
from cl_suites.remedies import RemedyConfig, as_dict, split_method

if TYPE_CHECKING:
    from cl_suites.job.option_specs import Option
    from cl_suites.job.run_spec import JobSpec
    from cl_suites.suites import SuiteInfo


def signature_defaults(cls: type) -> dict[str, Any]:
    """Keyword defaults of ``cls(...)`` through its bases."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.default is not p.empty:
                out[p.name] = p.default
    return out


@dataclass(frozen=True)
class TorchLearner:
    """An SB3/torch learner of ``baselines_sb3`` (``ppo``: ``ContinualPPO``; ``vtrace``:
    ``VTrace``): one process, one seed per run, the torch CL methods
    (``declarations.TORCH_METHODS``) and own ones."""

    name: str
    suites: tuple[str, ...]
    methods: tuple[str, ...] | None = TORCH_METHODS
    own_methods: bool = True
    seed_groups: bool = False
    refused_job_options: tuple[str, ...] = ()

    def options(self) -> Mapping[str, Option]:
        from cl_suites.job.torch.options import OPTIONS

        return OPTIONS

    def settings(
        self, suite: SuiteInfo, method: str, preset: str, job: Values, overrides: Values
    ) -> tuple[Values, Values]:
        from cl_suites.job.torch.options import route_overrides

        hp = hyperparameters.compose(suite.family, suite.preset_key, self.name, method, preset)
        rest = route_overrides(hp, self.name, method, overrides)
        remedy = None if is_plugin_spec(method) else split_method(method)[1]
        if remedy is not None:  # every setting of the remedy in the run's settings
            defaults = as_dict(RemedyConfig(remedy=remedy))
            hp["method"] = {**{k: defaults[k] for k in REMEDY_OPTIONS}, **hp["method"]}
        return hp, rest

    def refuse_foreign(self, overrides: Values, learner: str) -> None:
        """The torch learners' own names are refused by the other learner's routing (it
        knows them from the presets it translates): nothing to add here."""

    def own_method_options(self, method: str, info: SuiteInfo) -> Mapping[str, Any]:
        if is_builtin_method(method):
            return {}
        from baselines_sb3.cl import method_class
        from cl_suites.job.method_options import plugin_options
        from cl_suites.job.run_spec import JOB_OPTIONS
        from cl_suites.job.torch.options import reserved_option_names
        from cl_suites.suites import COMMON_KWARGS

        reserved = reserved_option_names(JOB_OPTIONS, COMMON_KWARGS)
        return plugin_options(method, method_class(method), reserved)

    def option_names(
        self, method: str, hp: Mapping[str, Any], job_options: tuple[str, ...]
    ) -> dict[str, tuple[str, ...]]:
        from baselines_sb3.cl import method_class
        from baselines_sb3.keywords import accepted_options
        from cl_suites.job.torch.options import LEARNER_OPTIONS

        variant = hp["method"].get("variant")
        return {
            "learner": LEARNER_OPTIONS[self.name],
            "method": (
                *(("variant",) if is_builtin_method(method) else ()),
                *accepted_options(method_class(method, variant)),
            ),
            "policy": hyperparameters.POLICY_OPTIONS,
        }

    def device(self, job: Values, hp: Mapping[str, Any], suite: SuiteInfo, probe: bool) -> str:
        """The torch device (``cl_suites.job.torch.device``): ``auto`` takes a GPU for a
        convolutional policy. Beside a JAX engine (MEAL) JAX is kept from taking the GPU's
        memory up front."""
        from cl_suites.job.torch.device import AUTO, jax_beside_torch, resolve_device

        convolutional = hp.get("network", "mlp") != "mlp"
        device = resolve_device(job.get("device", AUTO), convolutional, probe=probe)
        if suite.family == "meal":  # its kitchens step in JAX, in this process
            jax_beside_torch()
        return device

    def rollout_steps(self, hp: Mapping[str, Any]) -> int:
        return int(hp["learner"].get("n_steps", 1))

    def finish(self, hp: dict[str, Any], num_envs: int) -> None:
        return None  # the learner's keywords are hp["learner"], checked when it is built

    def check_sequence(self, hp: Mapping[str, Any], sequence: Any) -> None:
        """A CNN over flat observations is refused here."""
        from baselines_sb3.factory import check_network

        try:
            check_network(hp.get("network", "mlp"), sequence)
        except ValueError as e:
            raise BadValueError(str(e)) from None

    def defaults(self, method: str, hp: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
        from baselines_sb3.cl import method_class
        from baselines_sb3.factory import learner_class

        variant = hp["method"].get("variant")
        return (
            signature_defaults(learner_class(self.name)),
            signature_defaults(method_class(method, variant)),
        )

    def train(
        self, specs: Sequence[JobSpec], seeds: Sequence[int], run_dirs: Sequence[Path], resume: bool
    ) -> None:
        from cl_suites.job.torch.train import run_torch

        run_torch(specs[0], int(seeds[0]), Path(run_dirs[0]), resume)

    def load_task_policy(self, spec: JobSpec, path: Path) -> Any:
        """Greedy ``policy(obs, task_ids) -> actions`` of a run's task policy
        (``cl_suites.job.torch.task_policies``)."""
        from cl_suites.job.torch.task_policies import load_task_policy

        return load_task_policy(path, spec)


PPO = TorchLearner("ppo", suites=("cora", "diagnostic", "meal"))
"""``--learner ppo``: SB3's PPO as CORA and MEAL run it (``ContinualPPO``; on MEAL: IPPO)."""
VTRACE = TorchLearner("vtrace", suites=("cora", "diagnostic"))
"""``--learner vtrace``: CORA's IMPALA learner (``VTrace``)."""
