"""``baselines_sb3.cora_weights``: our policies' parameters under CORA's names and back.

The names themselves are CORA's (``continual_rl@f2754bb`` ``ImpalaNet`` and
``ProgressAndCompressNet`` state dicts): ``test_cora_parity_pins.py`` compares every
gradient by those names against the pinned values of CORA's own models."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from baselines_sb3.cora_weights import cora_names, cora_state_dict, load_cora_state_dict
from baselines_sb3.networks import CoraResidualCNN, ImpalaDeepCNN, ImpalaShallowCNN
from baselines_sb3.pnc_policy import ProgressCompressPolicy
from baselines_sb3.policies import ContinualPolicy

SPACE = spaces.Dict(
    {
        "obs": spaces.Box(0, 255, (3, 64, 64), np.uint8),
        "prev_action": spaces.Discrete(15),
        "prev_reward": spaces.Box(-1, 1, (1,), np.float32),
    }
)


def _policy(cls=ContinualPolicy, extractor=ImpalaShallowCNN, seed=0):
    th.manual_seed(seed)
    return cls(
        SPACE, spaces.Discrete(15), lambda _: 1e-3, net_arch=[], features_extractor_class=extractor
    )


@pytest.mark.parametrize("extractor", [ImpalaShallowCNN, CoraResidualCNN])
def test_round_trip_through_coras_names(extractor):
    source, target = _policy(extractor=extractor, seed=0), _policy(extractor=extractor, seed=1)
    state = cora_state_dict(source)
    assert "policy.weight" in state and "baseline.bias" in state
    assert "_conv_net._post_flatten.weight" in state
    if extractor is CoraResidualCNN:  # a residual block's convs are its _res_block.1 / .3
        assert "_conv_net._conv_net.2._res_block.3.weight" in state
    load_cora_state_dict(target, state)
    for (name, a), (_, b) in zip(source.named_parameters(), target.named_parameters(), strict=True):
        assert th.equal(a, b), name


def test_pnc_kb_has_both_of_coras_names_and_adapters_are_numbered_in_layer_order():
    policy = _policy(ProgressCompressPolicy)
    names = cora_names(policy)
    assert names["kb.action_net.weight"] == [
        "knowledge_base.policy.weight",
        "_active_column._knowledge_base.policy.weight",
    ]
    assert names["action_net.bias"] == ["_active_column.policy.bias"]
    first = policy.adapted_layers[0].replace(".", "__")
    assert names[f"adapters.{first}.0.weight"] == ["_active_column._adaptor_params.0"]
    assert names[f"adapters.{first}.2.bias"] == ["_active_column._adaptor_params.3"]
    copy = _policy(ProgressCompressPolicy, seed=3)
    load_cora_state_dict(copy, cora_state_dict(policy))
    assert all(th.equal(a, b) for a, b in zip(policy.parameters(), copy.parameters(), strict=True))


def test_a_missing_or_misshapen_tensor_is_named():
    policy = _policy()
    state = cora_state_dict(policy)
    del state["baseline.bias"]
    with pytest.raises(ValueError, match=r"no 'baseline.bias' \(for our 'value_net.bias'\)"):
        load_cora_state_dict(policy, state)
    state = cora_state_dict(policy)
    state["policy.weight"] = th.zeros(3, 3)
    with pytest.raises(ValueError, match="'policy.weight' has shape"):
        load_cora_state_dict(policy, state)


def test_networks_cora_does_not_have_are_refused():
    with pytest.raises(ValueError, match="ImpalaDeepCNN has no counterpart in CORA.s ImpalaNet"):
        cora_state_dict(_policy(extractor=ImpalaDeepCNN))
