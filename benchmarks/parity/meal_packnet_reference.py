"""Our PackNet against MEAL 057f862's on the same parameters, and the pins.

Imports MEAL's ``experiments/continual/packnet.py`` from a checkout of TTomilin/MEAL at
057f862 (nothing of it is copied into this project; ``--meal-repo``, default
``/tmp/refs/meal057``) and plays the cases of ``benchmarks/parity/meal_packnet_cases.py``
on it and on ours (``baselines_jax.cl.packnet.PackNet``). MEAL's rules key on its layer
names (``get_layer_name``: ``actor_Dense_1``, ``actor_LayerNorm_1``,
``actor_Dense_multi_head``, ...), so our parameter trees go to MEAL renamed by
``baselines_jax.cl.packnet.meal_layer_name`` and come back in our names. MEAL's methods are
called jitted, on array states, as its trainer calls them inside its compiled programs:
``mask_gradients``, ``on_train_end`` (on a flax ``TrainState``), ``on_finetune_end``,
``get_eval_mask`` and ``apply_eval_mask``.

The network too: MEAL's PackNet actor-critic (``experiments/model/mlp_packnet.py``, which
its IPPO builds whenever the method is PackNet) and ours with PackNet's default
``network`` (``mlp-packnet``) are built for ``meal_packnet_cases.NETWORK_CASES``; MEAL's
initial parameters, renamed, must fill exactly our tree (same layers, same shapes: one
LayerNorm per trunk, after the first layer), and both networks must give the same
log-probabilities and values, byte for byte, on the same observations and task ids.

Every stage's arrays are compared bit for bit (masks) and byte for byte (float32
parameters and gradients); a table per case prints the stages' hashes and counts.
``--write`` stores MEAL's summary (hashes of the bits or bytes, per-leaf counts or sums) in
``tests/golden/meal_packnet_reference.json``, which
``tests/baselines/test_jax_packnet.py::test_reference_pins`` checks ours against::

    python benchmarks/parity/meal_packnet_reference.py --write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.parity import meal_packnet_cases as C  # noqa: E402

PINS = ROOT / "tests" / "golden" / "meal_packnet_reference.json"


def load_meal(repo: Path) -> Any:
    """MEAL's ``experiments.continual.packnet`` module."""
    if not (repo / "experiments" / "continual" / "packnet.py").exists():
        raise SystemExit(f"--meal-repo must be a checkout of TTomilin/MEAL at 057f862: {repo}")
    sys.path.insert(0, str(repo))
    import experiments.continual.packnet as packnet

    return packnet


class MealSide:
    """MEAL's ``Packnet`` (as ``experiments/algos/ippo.py:50-52`` builds it) on our trees,
    renamed to MEAL's layer names and back."""

    def __init__(self, packnet: Any, case: dict[str, Any]):
        import flax.linen as nn
        import jax
        import optax
        from flax.training.train_state import TrainState

        self.jax, self.mod, self.case = jax, packnet, case
        self.cl = packnet.Packnet(
            seq_length=case["num_tasks"], prune_instructions=0.4,
            train_finetune_split=(8, 2), prunable_layers=[nn.Dense, nn.Conv],
        )  # fmt: skip
        self.tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-4, eps=1e-5))
        self.TrainState = TrainState
        cl = self.cl
        self._grads = jax.jit(cl.mask_gradients)
        self._train_end = jax.jit(cl.on_train_end)
        self._finetune_end = jax.jit(cl.on_finetune_end)
        self._eval_mask = jax.jit(cl.get_eval_mask)
        self._apply = jax.jit(cl.apply_eval_mask)

    # -- names ---------------------------------------------------------------------------
    def to_meal(self, tree: Any) -> dict:
        from baselines_jax.cl.packnet import meal_layer_name

        mh = self.case["multi_head"]
        return {"params": {meal_layer_name(k, mh): dict(v) for k, v in tree["params"].items()}}

    def to_ours(self, tree: Any) -> dict:
        from baselines_jax.cl.packnet import meal_layer_name

        mh = self.case["multi_head"]
        names = {meal_layer_name(k, mh): k for k in self._ours}
        return {"params": {names[k]: dict(v) for k, v in tree["params"].items()}}

    def _quiet(self, fn, *args):
        """MEAL's ``jax.debug.print`` lines go to a buffer."""
        with contextlib.redirect_stdout(io.StringIO()):
            out = fn(*args)
            self.jax.effects_barrier()
        return out

    # -- the side ------------------------------------------------------------------------
    def init(self, params):
        import jax.numpy as jnp

        self._ours = list(params["params"])
        p = self.to_meal(params)
        return self.mod.PacknetState(  # MEAL's init_cl_state (experiments/utils.py:124-132)
            masks=self.cl.init_mask_tree(p), mask={}, current_task=jnp.int32(0),
            train_mode=jnp.bool_(True), mask_memory=[], weight_memory=[],
        )  # fmt: skip

    def mask_grads(self, state, grads):
        return self.to_ours(self._quiet(self._grads, state, self.to_meal(grads)))

    def prune(self, params, state):
        ts = self.TrainState.create(apply_fn=None, params=self.to_meal(params), tx=self.tx)
        ts, state = self._quiet(self._train_end, ts, state)
        return self.to_ours(ts.params), state

    def finetune_end(self, params, state):
        ts = self.TrainState.create(apply_fn=None, params=self.to_meal(params), tx=self.tx)
        _, state = self._quiet(self._finetune_end, ts, state)
        return state

    def eval_mask(self, state, task):
        import jax.numpy as jnp

        return self.to_ours(self._quiet(self._eval_mask, jnp.int32(task), state))

    def eval_params(self, params, state, task):
        import jax.numpy as jnp

        mask = self._quiet(self._eval_mask, jnp.int32(task), state)
        return self.to_ours(self._quiet(self._apply, self.to_meal(params), mask))

    def masks(self, state):
        return self.to_ours(state.masks)


def compare_network(name: str, case: dict[str, Any]) -> dict[str, Any]:
    """MEAL's PackNet network against ours on MEAL's initial parameters; prints one line
    and returns the pin (MEAL's parameters in our names, the hash of its log-probabilities
    and values) with ``same``."""
    import jax
    import jax.numpy as jnp
    from experiments.model.mlp_packnet import ActorCritic as MealPacknetNet

    from baselines_jax.cl.packnet import meal_layer_name
    from baselines_jax.learner import NUM_ACTIONS

    theirs = MealPacknetNet(
        NUM_ACTIONS, "relu", case["num_tasks"], case["multi_head"], case["shared_backbone"],
        C.NETWORK_WIDTH, 2, True, True,
    )  # fmt: skip  # the positional order of algos/ippo.py:76-79, layer norm on
    meal_params = theirs.init(jax.random.PRNGKey(3), jnp.zeros((1, C.NETWORK_OBS)), env_idx=0)
    _, shape = C.our_network(case)
    ours = {meal_layer_name(k, case["multi_head"]): k for k in shape["params"]}
    ours["common_LayerNorm_0"] = "common_ln1"  # MEAL's shared norm: get_layer_name(.., 0)
    # a layer ours lacks keeps MEAL's name: the trees then differ and the case fails
    params = {"params": {ours.get(k, k): dict(v) for k, v in meal_params["params"].items()}}
    meal_out = []
    for task in range(case["num_tasks"]):  # MEAL's env_idx: one task per call
        pi, v, _ = theirs.apply(meal_params, C.network_inputs(), env_idx=task)
        meal_out += [np.asarray(pi.logits), np.asarray(v)]  # distrax: log-softmax logits
    our_out = C.our_network_outputs(case, params)
    same = our_out is not None and all(
        a.tobytes() == b.tobytes() for a, b in zip(meal_out, our_out, strict=True)
    )
    digest = C.digest(meal_out)
    print(f"network {name:24s} layers {'same' if our_out is not None else 'DIFFER'}  "
          f"outputs {digest}  {'yes' if same else 'NO'}")  # fmt: skip
    params_lists = jax.tree.map(lambda x: np.asarray(x).tolist(), params)
    return {"params": params_lists, "hash": digest, "same": same}


def compare(name: str, theirs: list, ours: list) -> int:
    """Print the case's table; return the number of stages that differ."""
    import jax

    print(f"\n== {name}")
    print(f"{'stage':44s} {'MEAL hash':16s} {'ours hash':16s} {'true/sum':>12s}  equal")
    bad = 0
    s_theirs, s_ours = C.summary(theirs), C.summary(ours)
    for (stage, a), (_, b) in zip(theirs, ours, strict=True):
        la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
        same = C.leaf_names(a) == C.leaf_names(b) and all(
            x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
            for x, y in zip(map(np.asarray, la), map(np.asarray, lb), strict=True)
        )
        bad += not same
        total = sum(s_theirs[stage]["leaves"].values())
        print(f"{stage:44s} {s_theirs[stage]['hash']} {s_ours[stage]['hash']} "
              f"{total:12.4f}  {'yes' if same else 'NO'}")  # fmt: skip
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--meal-repo", type=Path, default=Path("/tmp/refs/meal057"))
    p.add_argument("--write", action="store_true", help=f"write the pins to {PINS}")
    args = p.parse_args(argv)
    packnet = load_meal(args.meal_repo)
    pins: dict[str, Any] = {"meal": "TTomilin/MEAL@057f862", "cases": {}}
    bad = 0
    for name, case in C.CASES.items():
        theirs = C.run_case(case, MealSide(packnet, case))
        ours = C.run_case(case, C.OurSide(case))
        bad += compare(name, theirs, ours)
        pins["cases"][name] = C.summary(theirs)
    print()
    pins["networks"] = {}
    for name, case in C.NETWORK_CASES.items():
        pin = compare_network(name, case)
        bad += not pin.pop("same")
        pins["networks"][name] = pin
    stages = sum(len(c) for c in pins["cases"].values())
    print(f"\n{stages - bad} of {stages} stages bit-identical")
    if args.write:
        PINS.write_text(json.dumps(pins, indent=1) + "\n")
        print(f"pins written to {PINS}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
