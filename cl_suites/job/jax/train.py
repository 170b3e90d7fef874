"""The JAX wing's job: the JAX IPPO learner (``ppo-jax``, MEAL suites), one or many seeds.

The learner's entry (``cl_suites.job.jax.entry``) hands a ``ppo-jax`` run here
(:func:`run_jax`); everything around the learner is built with the run pieces both wings
share (``cl_suites.job.shared``): the run directory and its log (``RunLog``: metadata.json,
eval.csv, episodes.csv), MEAL's evaluation (the core ``Evaluator`` with
``MealEvalSource``: greedy policy, sparse delivery returns, every ``eval_every`` env steps
of each task), videos, ``progress.json`` and the rich bar (``RunProgress``), resume checks
and the report.

Training: per schedule segment (a task in a cycle), ``JaxIPPO.train`` runs the task's
PPO updates in chunks, each chunk one compiled program (rollout and epochs, no host round
trip per env step), cut at the evaluation and checkpoint points; ``end_task`` closes each
task (CL importances / anchors, the optimizer reset as MEAL). A point that falls inside
an update is taken at the end of that update (MEAL's points, every 100 updates, fall on
update ends). Compile time is measured by the learner and kept out of steps/s.

Several seeds (``seeds``) train vmapped in one program on one set of kitchens and write
one ordinary run directory each (its own run log, evaluator, progress file and
checkpoint); each equals the single-seed run of that seed with the same kitchens.

A plasticity remedy (``IPPOConfig.remedy``) runs inside the learner; what it did goes to
``remedy.csv`` (``RunLog.log_remedy``, the torch job's rows: :func:`remedy_rows` from the
learner's per-update metrics after each chunk, and the task-end act after ``end_task``),
cut back with the other logs on resume. ``end_task`` hears which task follows (a reset
re-initialises that task's head; nothing changes after the last task).

Training episodes (``episodes.csv``): every finished one, and at each task's end the
episodes still running, with their return and length so far (as the torch job logs a
game cut by a switch).

Checkpoints (``cl_suites.job.jax.checkpoint``): every ``checkpoint_every`` env steps, at
every task's end and at the end; a resume cuts the logs back to the checkpoint and
continues bit for bit (parameters, optimizer and CL state, env state and PRNG keys are in
the state). With ``keep_task_policies`` each seed's parameters at every task's end are
kept as well (``cl_suites.job.jax.task_policies``: ``checkpoint/task-NNN.npz``).

Steps are env steps (one joint action of all agents).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cl_suites.core.evaluation import Evaluator
from cl_suites.core.interrupts import outcome_of
from cl_suites.core.task import Segment, task_seed
from cl_suites.job import shared
from cl_suites.job.jax.acting import eval_policy
from cl_suites.job.jax.checkpoint import (
    common_checkpoint,
    load_jax_checkpoint,
    save_jax_checkpoint,
)
from cl_suites.job.jax.task_policies import save_task_policy
from cl_suites.job.run_spec import JobSpec
from cl_suites.metrics.plasticity_tracker import PROBE_FILE, PlasticityTracker
from cl_suites.rundir.progress import RunProgress
from cl_suites.rundir.runlog import RunLog, truncate_logs
from cl_suites.rundir.task_policies import remove_task_policies_after

PLASTICITY_KEY = "plasticity|"
"""Prefix of the plasticity tracker's arrays in a seed's checkpoint (``flat_state``)."""

SAMPLING_SEED_OFFSET = 3_000_017
"""Offset of the keys of sampled evaluation actions (``eval_deterministic=False``)."""


def seed_slice(tree: Any, i: int) -> Any:
    """Seed ``i``'s part of a pytree whose leaves have the leading seed axis."""
    import jax

    return jax.tree.map(lambda x: x[i], tree)


def jax_numpy_slice(tree: Any, i: int) -> Any:
    """Seed ``i``'s part of a pytree with the leading seed axis, as numpy arrays."""
    import jax

    return jax.tree.map(lambda x: np.asarray(x)[i], tree)


SOUPS = ("episode_soups", "soups")
"""``episode_soups.csv``'s value in the chunk's metrics, and its column."""
CUT_SOUPS = ("ep_soups", "soups")
"""The same for episodes cut by a task's end: the field of the batch state, and the column."""


def episode_rows(
    metrics: dict[str, Any],
    seed_index: int,
    start_step: int,
    task_id: int,
    num_envs: int,
    episode_len: int,
    value: tuple[str, str] = ("episode_return", "episode_return"),
) -> list[dict[str, Any]]:
    """``episodes.csv`` rows of the training episodes one seed finished in a chunk.

    ``metrics["episode_done"]`` and ``metrics["episode_return"]``, ``(updates, K,
    num_steps, num_envs)``: whether env ``e``'s episode (of ``episode_len`` steps) ended at
    that step, and its return (agent 0's, the team's shared reward). An episode ending at
    vector step ``j`` of the chunk is logged at ``start_step + (j + 1) * num_envs`` (env
    steps), as the torch job logs it: one row per env. ``value``: ``(metric, column)`` of
    the logged value (``episodes.csv``: the return; ``episode_soups.csv``:
    ``("episode_soups", "soups")``, the soups the team delivered).
    """
    metric, column = value
    done = np.asarray(metrics["episode_done"])[:, seed_index].reshape(-1, num_envs)
    values = np.asarray(metrics[metric])[:, seed_index].reshape(-1, num_envs)
    steps, envs = np.nonzero(done)
    return [
        {
            "total_step": int(start_step + (j + 1) * num_envs),
            "task_id": int(task_id),
            column: float(values[j, e]),
            "episode_length": int(episode_len),
        }
        for j, e in zip(steps, envs, strict=True)
    ]


def remedy_rows(
    metrics: dict[str, Any],
    names: Sequence[str],
    seed_index: int,
    start_step: int,
    rollout: int,
    task_id: int,
) -> list[dict[str, Any]]:
    """``remedy.csv`` rows (``REMEDY_COLUMNS``) of what one seed's remedy did in a chunk,
    from the learner's metrics ``names`` (``JaxIPPO.remedy_metrics``): per update that
    recycled (ReDo), one ``recycled`` row per layer (zeros too); per optimizer step that
    replaced a unit (continual backprop), one ``replaced`` row per layer; per update that
    injected plasticity, one ``injected`` row (layer ``all``). Rows are logged at the
    update's last env step with its 1-based count within the task (``update``)."""
    if not names:
        return []
    values = {n: np.asarray(metrics[n])[:, seed_index] for n in names}

    def layers(event: str) -> dict[str, np.ndarray]:
        prefix = f"remedy/{event}/"
        return {n[len(prefix) :]: v for n, v in values.items() if n.startswith(prefix)}

    recycled, replaced = layers("recycled"), layers("replaced")
    rows: list[dict[str, Any]] = []
    for u, update in enumerate(values["remedy/update"]):
        row = {"total_step": int(start_step + (u + 1) * rollout), "task_id": int(task_id),
               "update": int(update)}  # fmt: skip
        acts: list[tuple[str, dict[str, int]]] = []
        if recycled and values["remedy/recycled"][u]:
            acts.append(("recycled", {k: int(v[u]) for k, v in recycled.items()}))
        for j in range(next(iter(replaced.values())).shape[-1] if replaced else 0):
            step = {k: int(v[u, j]) for k, v in replaced.items()}
            if any(step.values()):
                acts.append(("replaced", step))
        if "remedy/injected" in values and values["remedy/injected"][u]:
            acts.append(("injected", {"all": 0}))
        rows += [
            {**row, "event": event, "layer": layer, "units": n}
            for event, units in acts
            for layer, n in units.items()
        ]
    return rows


def cut_episode_rows(
    state: Any,
    seed_index: int,
    step: int,
    task_id: int,
    value: tuple[str, str] = ("ep_return", "episode_return"),
) -> list[dict[str, Any]]:
    """``episodes.csv`` rows of the episodes one seed was playing when task ``task_id``
    ended at env step ``step`` (``JaxIPPO`` restarts its envs at the next task, as MEAL):
    one row per env with the return and length so far (``state.ep_return (K, M)``,
    ``state.t (K,)``), logged at the switch step under the old task, as the torch job's
    ``MealBatchedEnv`` and the other suites' vector envs report a game cut by a switch.
    None when the episodes had just ended (``t == 0``). ``value``: ``(state field,
    column)`` (``("ep_soups", "soups")`` for ``episode_soups.csv``)."""
    field, column = value
    length = int(np.asarray(state.t)[seed_index])
    if length == 0:
        return []
    values = np.asarray(getattr(state, field))[seed_index]
    return [
        {
            "total_step": int(step),
            "task_id": int(task_id),
            column: float(v),
            "episode_length": length,
        }
        for v in values
    ]


class JaxRun:
    """One seed's share of a ``ppo-jax`` job: its directory, log, evaluator and progress."""

    def __init__(self, run_dir: Path, seed: int, run_log: RunLog, evaluator: Evaluator,
                 progress: RunProgress):  # fmt: skip
        self.run_dir, self.seed = run_dir, int(seed)
        self.run_log, self.evaluator, self.progress = run_log, evaluator, progress
        self.plasticity: PlasticityTracker | None = None

    def close(self, outcome: str, reason: str | None = None) -> None:
        self.progress.close(outcome, reason)
        self.evaluator.close()
        self.run_log.close()


def run_jax(specs: list[JobSpec], seeds: list[int], run_dirs: list[Path], resume: bool) -> None:
    """Train ``seeds`` (one ``JobSpec`` each, same kitchens) vmapped in one program, one
    run directory each (``run_dirs``); ``resume``: from their newest common checkpoint.
    Each run's report at the end, and with several seeds below one directory
    (``--seeds``) one report of them all, as a sweep's."""
    device = jax_device()
    metadata = [shared.metadata(s, seed, device) for s, seed in zip(specs, seeds, strict=True)]
    if resume:
        for run_dir, meta in zip(run_dirs, metadata, strict=True):
            shared.resume_checked(run_dir, meta)
    shared.clean_unstarted(
        run_dirs, resume, lambda: _train(specs, seeds, run_dirs, resume, metadata)
    )
    for run_dir in run_dirs:
        shared.write_report(run_dir, specs[0].options)
    parents = {run_dir.parent for run_dir in run_dirs}
    if len(run_dirs) > 1 and len(parents) == 1:  # --seeds: one report of all seeds, as a sweep
        shared.write_report(parents.pop(), specs[0].options, runs=run_dirs)


def jax_device() -> str:
    """The platform JAX runs ``ppo-jax`` on (``cpu``, ``gpu``, ...)."""
    import jax

    return str(jax.default_backend())


def _train(
    specs: Sequence[JobSpec],
    seeds: Sequence[int],
    run_dirs: Sequence[Path],
    resume: bool,
    metadata: Sequence[dict[str, Any]],
) -> None:
    """The training of :func:`run_jax`: the learner, its state (or the checkpoint's), one
    ``JaxRun`` per seed (its run log opened with its ``metadata``), the loop."""
    import baselines_jax  # JAX starts here, when a run trains

    spec = specs[0]
    learner_type = getattr(baselines_jax, spec.learner_entry.learner_type)
    learner = learner_type(spec.meal, spec.learner_config, list(seeds))
    loop = _Loop(learner, spec)
    files = common_checkpoint(run_dirs) if resume else None
    evaluator_states = None
    plasticity_states: list[Any] = []
    if files is not None:
        loaded = [load_jax_checkpoint(f) for f in files]
        if all(m.get("finished") for _, m in loaded):
            print(f"runs {', '.join(map(str, run_dirs))} are already complete")
            return
        loop.step = int(loaded[0][1]["total_step"])
        plasticity_states = [
            unflat_state({k: v for k, v in a.items() if k.startswith(PLASTICITY_KEY)})
            for a, _ in loaded
        ]
        keys = [k for k in loaded[0][0] if not k.startswith(PLASTICITY_KEY)]
        arrays = {k: np.stack([a[k] for a, _ in loaded]) for k in keys}
        loop.state = learner.load_state_dict(arrays)
        evaluator_states = [m["evaluator"] for _, m in loaded]
    if resume:
        for d in run_dirs:
            truncate_logs(d, loop.step if files is not None else -1)
            remove_task_policies_after(d, spec.schedule, loop.step if files is not None else -1)
    error: BaseException | None = None
    try:
        for i, (s, seed, d) in enumerate(zip(specs, seeds, run_dirs, strict=True)):
            opened = shared.open_run(
                s, seed, d, resume, loop.step, meta=metadata[i], show_progress=i == 0
            )
            loop.runs.append(JaxRun(d, seed, *opened))
            if evaluator_states is not None:
                loop.runs[-1].evaluator.load_state_dict(evaluator_states[i])
            loop.runs[-1].plasticity = _tracker(s, d, loop.runs[-1].run_log)
            if loop.runs[-1].plasticity is not None and plasticity_states and plasticity_states[i]:
                loop.runs[-1].plasticity.load_state_dict(plasticity_states[i])
        if loop.state is None:
            loop.state = learner.init_state()
        loop.run(spec.schedule)
    except BaseException as e:
        error = e
        raise
    finally:
        for run in loop.runs:
            run.close(*outcome_of(error))


class _Loop:
    """The training loop of one ``ppo-jax`` job: the learner, its state, the run's step
    (env steps) and every seed's ``JaxRun``."""

    def __init__(self, learner: Any, spec: Any):
        self.learner = learner
        self.num_envs = int(spec.num_envs)
        self.rollout = int(spec.hp["learner"]["num_steps"]) * self.num_envs
        self.episode_len = int(spec.meal.episode_len)
        self.every = spec.options.checkpoint_every
        self.greedy = spec.options.eval_deterministic
        self.keep_task_policies = bool(spec.options.keep_task_policies)
        self.runs: list[JaxRun] = []
        self.state: Any = None
        self.step = 0
        self.task: int | None = None  # the task trained up to self.step
        self.grad_norms: list[dict[str, float]] = []
        self._probe_apply: Any = None

    def run(self, schedule: Sequence[Segment]) -> None:
        ends = [seg.end_step for seg in schedule]
        index = min(sum(e <= max(self.step - 1, 0) for e in ends), len(schedule) - 1)
        self.task = int(schedule[index].task_id)
        if self.step == 0:  # a resumed run's checkpoint holds what it observed
            self.observe()
        self.evaluate(due_only=True)  # eval_at_start
        for i, seg in enumerate(schedule):
            if self.step < seg.end_step:
                following = schedule[i + 1].task_id if i + 1 < len(schedule) else None
                self.train_segment(seg, following)
        self.evaluate(due_only=False)
        self.save(finished=True)

    def train_segment(self, seg: Segment, next_task: int | None = None) -> None:
        """Train ``seg`` from the current step to its end in chunks between eval and
        checkpoint points; at its end the evaluation and diagnostics of the task's end,
        then ``end_task`` (told ``next_task``, the next segment's task; ``None`` after the
        last), then a checkpoint.

        A method with a fine-tune phase (``learner.finetunes``, PackNet) takes the
        segment's last ``learner.finetune_updates`` updates to fine-tune (the schedule
        holds them: ``JobSpec.schedule``): after the training updates' chunk and its
        evaluation, ``learner.end_train`` (the pruning), then the fine-tune chunks; a
        checkpoint at or after that point holds the pruned state, so a resume there goes
        on fine-tuning."""
        learner, next_ckpt = self.learner, (self.step // self.every + 1) * self.every
        self.task_started(seg.task_id)
        train_end = seg.end_step - learner.finetune_updates * self.rollout
        while self.step < seg.end_step:
            phase_end = train_end if learner.finetunes and self.step < train_end else seg.end_step
            target = min(phase_end, self.runs[0].evaluator.next_eval_step, next_ckpt)
            updates = max(1, -(-(target - self.step) // self.rollout))  # points inside: end
            updates = min(updates, (phase_end - self.step) // self.rollout)
            compiled = learner.compile_seconds
            self.state, metrics = learner.train(self.state, seg.task_id, updates, cycle=seg.cycle)
            start = self.step
            self.step += updates * self.rollout
            self.task = int(seg.task_id)
            self.keep_grad_norms(metrics)
            self.observe()
            ended = self.step >= seg.end_step
            for i, run in enumerate(self.runs):
                rows = episode_rows(metrics, i, start, seg.task_id, self.num_envs, self.episode_len)
                soups = episode_rows(
                    metrics, i, start, seg.task_id, self.num_envs, self.episode_len, SOUPS
                )
                if ended:  # the running episodes, cut by the switch
                    rows += cut_episode_rows(self.state, i, self.step, seg.task_id)
                    soups += cut_episode_rows(self.state, i, self.step, seg.task_id, CUT_SOUPS)
                run.run_log.log_episodes(rows)
                run.run_log.log_episode_soups(soups)
                acts = remedy_rows(
                    metrics, learner.remedy_metrics, i, start, self.rollout, seg.task_id
                )
                run.run_log.log_remedy(acts)
            # the end of a task is evaluated (and diagnosed) and its policy kept before
            # end_task closes it (and a remedy changes the network)
            self.evaluate(due_only=True)
            if learner.finetunes and self.step == train_end:  # MEAL: prune, then fine-tune
                self.state = learner.end_train(self.state)
            if ended:
                self.save_task_policies(seg)
                done = int(np.asarray(self.state.update)[0])  # updates of the task
                self.state = learner.end_task(self.state, seg.task_id, next_task)
                self.log_task_rows(seg.task_id)
                if learner.switch_event is not None and next_task is not None:
                    row = {"total_step": self.step, "task_id": int(seg.task_id), "update": done,
                           "event": learner.switch_event, "layer": "all", "units": 0}  # fmt: skip
                    for run in self.runs:
                        run.run_log.log_remedy([row])
            compile_s = learner.compile_seconds - compiled
            for run in self.runs:
                run.progress.add_compile_time(compile_s)
                run.progress.update(self.step)
            if self.step >= next_ckpt or ended:  # every task's end too
                self.save()
                next_ckpt = (self.step // self.every + 1) * self.every

    def evaluate(self, due_only: bool) -> None:
        """Evaluate every seed now: when a point is due (``due_only``), else unless the
        last evaluation was at this step (the end of the sequence)."""
        step = self.step
        todo = [
            i
            for i, run in enumerate(self.runs)
            if (run.evaluator.due(step) if due_only else run.evaluator.last_eval_step != step)
        ]
        if not todo:
            return
        params = self.state.params
        masked = self.learner.method.masks_eval
        for i in todo:
            seed = task_seed(self.runs[i].seed + SAMPLING_SEED_OFFSET, step, 0)
            cl = seed_slice(self.state.cl, i) if masked else None
            policy = eval_policy(self.learner, seed_slice(params, i), self.greedy, seed, cl)
            self.runs[i].evaluator.evaluate(step, policy)
            tracker = self.runs[i].plasticity
            if tracker is not None:
                tracker.measure(step, self.task if self.task is not None else 0, self.probe(i))

    def log_task_rows(self, task_id: int) -> None:
        """The CL method's rows of the task's end (``packnet.csv``: PackNet's capacity
        left and sparsity per layer, after ``end_task``), every seed."""
        method = self.learner.method
        if not method.finetunes:
            return
        for i, run in enumerate(self.runs):
            cl = jax_numpy_slice(self.state.cl, i)
            rows = method.task_rows(cl, jax_numpy_slice(self.state.params, i))
            run.run_log.log_packnet(
                [{"total_step": self.step, "task_id": int(task_id), **r} for r in rows]
            )

    # -- plasticity diagnostics ----------------------------------------------------------
    def probe(self, i: int) -> Any:
        """Seed ``i``'s network as a ``NetworkProbe`` (its parameters now)."""
        from baselines_jax.plasticity import JaxProbe, actor_critic_apply, actor_critic_networks

        net = self.learner.network
        if self._probe_apply is None:
            self._probe_apply = actor_critic_apply(net)
        grads = self.grad_norms[i] if i < len(self.grad_norms) else None
        params = seed_slice(self.state.params, i)
        return JaxProbe(
            params, self._probe_apply, actor_critic_networks(net.shared_backbone), grads
        )

    def observe(self) -> None:
        """Offer every seed's current env observations (all envs and agents) to its probe
        batch, as observations of the task trained up to now."""
        if not any(run.plasticity is not None for run in self.runs) or self.state is None:
            return
        obs = np.asarray(self.state.obs)  # (K, M, n, H, W, C)
        for i, run in enumerate(self.runs):
            if run.plasticity is not None:
                rows = obs[i].reshape(-1, *obs.shape[-3:])
                run.plasticity.observe(self.task if self.task is not None else 0, rows, self.step)

    def task_started(self, task_id: int) -> None:
        for i, run in enumerate(self.runs):
            if run.plasticity is not None and run.plasticity.task != task_id:
                run.plasticity.task_started(task_id, self.probe(i))

    def keep_grad_norms(self, metrics: dict[str, Any]) -> None:
        """The gradient norms of the chunk's last update, per seed and network."""
        if "grad_norm_actor" not in metrics:
            return
        actor = np.asarray(metrics["grad_norm_actor"])[-1]
        critic = np.asarray(metrics["grad_norm_critic"])[-1]
        self.grad_norms = [
            {"actor": float(a), "critic": float(c)} for a, c in zip(actor, critic, strict=True)
        ]

    def save_task_policies(self, seg: Segment) -> None:
        """Every seed's parameters at the end of ``seg`` (the ones its evaluation of
        that end acted with) as its run's task policy, with ``keep_task_policies``."""
        if not self.keep_task_policies:
            return
        for i, run in enumerate(self.runs):
            params = seed_slice(self.state.params, i)
            save_task_policy(run.run_dir, seg, self.step, params, run.seed)

    def save(self, finished: bool = False) -> None:
        """Every seed's checkpoint (its slice of the state) in its run directory."""
        arrays = self.learner.state_dict(self.state)
        for i, run in enumerate(self.runs):
            meta = {
                "total_step": int(self.step),
                "seed": run.seed,
                "evaluator": run.evaluator.state_dict(),
                "finished": finished,
                "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            seed_arrays = {k: np.asarray(v)[i] for k, v in arrays.items()}
            if run.plasticity is not None:
                seed_arrays.update(flat_state(run.plasticity.state_dict(), PLASTICITY_KEY))
            save_jax_checkpoint(run.run_dir, seed_arrays, meta)


def _tracker(spec: Any, run_dir: Path, run_log: RunLog) -> PlasticityTracker | None:
    """Seed's plasticity tracker (``None`` with ``plasticity=false``). ppo-jax takes probe
    observations at the end of every training chunk (each evaluation or checkpoint
    point): ``plasticity_probe_stride`` does not apply."""
    job = spec.options
    if not job.plasticity:
        return None
    settings = job.plasticity_settings(probe_stride=1)
    return PlasticityTracker(settings, run_log.log_plasticity, Path(run_dir) / PROBE_FILE)


def flat_state(tree: Any, prefix: str) -> dict[str, np.ndarray]:
    """A nested dict of arrays, numbers and ``None`` as flat arrays named
    ``prefix + "|".join(path)`` (``None`` leaves are left out; empty dicts kept)."""
    out: dict[str, np.ndarray] = {}
    if isinstance(tree, dict):
        if not tree:
            out[prefix + "{}"] = np.zeros(0)
        for k, v in tree.items():
            out.update(flat_state(v, f"{prefix}{k}|"))
    elif tree is not None:
        out[prefix.rstrip("|")] = np.asarray(tree)
    return out


def unflat_state(arrays: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The inverse of :func:`flat_state` (``None`` for no arrays; 0-d arrays as
    Python numbers)."""
    if not arrays:
        return None
    root: dict[str, Any] = {}
    for key, value in arrays.items():
        parts = key[len(PLASTICITY_KEY) :].split("|")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if parts[-1] == "{}":
            continue
        node[parts[-1]] = value.item() if value.ndim == 0 else value
    return _with_nones(root)


def _with_nones(state: dict[str, Any]) -> dict[str, Any]:
    for key in ("run_reference", "task_reference", "task"):
        state.setdefault(key, None)
    state.setdefault("previous", {})
    state["probe"].setdefault("obs", None)
    state["probe"].setdefault("calls", {})
    return state
