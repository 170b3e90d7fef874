"""What differs between suite families at run time, as small pieces of a catalog entry.

A catalog entry (:class:`cl_suites.suites.SuiteInfo`) carries, besides its data fields,
a *runtime*: the object that builds the suite's run-time pieces. Two exist:

* :class:`VectorRuntime` (every single-agent gymnasium suite: CORA's, Diagnostic): the
  instance is the ``TaskSequence``, the training env a ``SequenceVectorEnv``, evaluation
  builds envs from the tasks' factories.
* ``cl_suites.meal.runtime.MealRuntime`` (``MEAL-<N>``): the instance is a ``MealSuite``
  (kitchens, agents), the training env MEAL's batched JAX engine, evaluation MEAL's own
  eval source, the run seed picks the kitchens.

Code that runs a suite asks the entry (``info.runtime``, ``info.step_unit``,
``info.evaluation``, ``instance.num_agents``) instead of asking "is this MEAL?". The
suites know no learner: how a learner sees the training env (the torch learner's SB3
view and where its observations live) is the job layer's (``cl_suites.job.torch.sb3_env``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from cl_suites.core.task import Schedule, TaskSequence

if TYPE_CHECKING:
    from cl_suites.suites import SuiteInfo


@dataclass(frozen=True)
class StepUnit:
    """The unit a suite counts its budgets, cadences and schedules in.

    Attributes:
        name: short form for progress bars and tables (``"agent steps"``).
        text: the run metadata's ``step_unit`` (the short form and what one step is).
    """

    name: str
    text: str


AGENT_STEPS = StepUnit("agent steps", "agent steps (env.step calls summed over sub-envs)")
"""Single-agent suites: one ``step`` of one (sub-)env is one step."""
ENV_STEPS = StepUnit("env steps", "env steps (one joint action of all agents)")
"""Multi-agent suites (MEAL): one joint action of all agents is one step."""


@dataclass(frozen=True)
class EvalDefaults:
    """A suite's evaluation protocol when the run does not set it.

    Attributes:
        at_start: evaluate before training (step 0); the job option ``eval_at_start``.
        per_task: count ``eval_every`` from the start of every task (MEAL's "every N
            updates of each task") instead of the global grid ``k * eval_every``; the job
            option ``eval_per_task``.
    """

    at_start: bool = True
    per_task: bool = False


EVAL_FROM_START = EvalDefaults()
"""CORA's protocol: evaluate at step 0, then every ``eval_every`` steps of the run."""


class SuiteInstance(Protocol):
    """A suite built with a run's options: what the job and the recorder use."""

    sequence: TaskSequence
    num_agents: int

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (``tasks``, ``metric_settings``, ...)."""
        ...

    def run_metadata(self) -> dict[str, Any]:
        """What a run's ``metadata.json`` adds for this suite (MEAL: score normalisers,
        kitchens, agents); ``{}`` for single-agent suites."""
        ...


@dataclass(frozen=True)
class SingleAgentSuite:
    """The instance of a single-agent suite: its ``TaskSequence``, one agent per env."""

    sequence: TaskSequence
    num_agents: int = 1

    def describe(self) -> dict[str, Any]:
        return self.sequence.describe()

    def run_metadata(self) -> dict[str, Any]:
        return {}


class SuiteRuntime(Protocol):
    """The run-time pieces of a suite family (see the module docstring).

    Attributes:
        training_metadata: what a trained run's ``metadata.json`` adds about how the
            main job trains the suite (MEAL: ``multi_agent``, parameter sharing).
        steps_on_cpu: its envs step on the CPU, one sub-env at a time (so many sub-envs
            per core are warned about); ``False`` for MEAL's jitted batched engine.
    """

    training_metadata: Mapping[str, Any]
    steps_on_cpu: bool

    def instance(self, info: SuiteInfo, kwargs: dict[str, Any]) -> SuiteInstance:
        """The suite built with ``kwargs`` (paper defaults otherwise)."""
        ...

    def run_instance(
        self, info: SuiteInfo, kwargs: dict[str, Any], *, seed: int, rollout: int
    ) -> tuple[SuiteInstance, dict[str, Any]]:
        """``(instance, kwargs)`` of a training run: the suite with the run's options
        as the main job uses it, and the options it was built with. ``seed`` is the run
        seed; ``rollout`` the steps of one learner update (``n_steps * num_envs``)."""
        ...

    def seeded_kwargs(self, kwargs: dict[str, Any], seed: int) -> dict[str, Any]:
        """``kwargs`` with what the run seed decides about the suite (MEAL: its
        kitchens, unless ``layout_seed`` is given)."""
        ...

    def vector_env(
        self,
        instance: SuiteInstance,
        schedule: Schedule,
        vectorization_mode: str,
        rollout_steps: int | None = None,
        env_workers: int | None = None,
    ) -> tuple[Any, Any]:
        """``(env, eval source)``: the env that follows ``schedule`` (the sequence cut for
        ``schedule.num_envs`` envs; ``.cursor``, ``.step``) and the evaluator's env source
        (``None``: the core ``Evaluator`` builds envs from the tasks' factories).
        ``rollout_steps``: steps per env of one learner update (MEAL holds its shaping
        weight for a whole update); ``env_workers``: worker processes of
        ``vectorization_mode="workers"``."""
        ...

    def eval_source(self, instance: SuiteInstance) -> Any:
        """The evaluator's env source without a training env (the JAX learner's job)."""
        ...


class VectorRuntime:
    """Single-agent gymnasium suites: ``SequenceVectorEnv`` and the core evaluator."""

    training_metadata: Mapping[str, Any] = MappingProxyType({})
    steps_on_cpu = True

    def instance(self, info: SuiteInfo, kwargs: dict[str, Any]) -> SingleAgentSuite:
        return SingleAgentSuite(info.build_sequence(**kwargs))

    def run_instance(
        self, info: SuiteInfo, kwargs: dict[str, Any], *, seed: int, rollout: int
    ) -> tuple[SingleAgentSuite, dict[str, Any]]:
        return self.instance(info, kwargs), kwargs

    def seeded_kwargs(self, kwargs: dict[str, Any], seed: int) -> dict[str, Any]:
        return dict(kwargs)

    def vector_env(
        self,
        instance: SuiteInstance,
        schedule: Schedule,
        vectorization_mode: str,
        rollout_steps: int | None = None,
        env_workers: int | None = None,
    ) -> tuple[Any, None]:
        from cl_suites.core.vector import SequenceVectorEnv

        env = SequenceVectorEnv(
            instance.sequence,
            vectorization_mode=vectorization_mode,
            env_workers=env_workers,
            schedule=schedule,
        )
        return env, None

    def eval_source(self, instance: SuiteInstance) -> None:
        return None


VECTOR_RUNTIME = VectorRuntime()
