"""Plasticity remedies on torch networks (issue 54): the algorithms, without the training
loop. Their settings and names are ``cl_suites.remedies``; ``baselines_sb3.cl`` runs them in
the learners.

* :mod:`.links`: which units can be recycled (:class:`Link`, :func:`policy_links`,
  :func:`sequential_links`, :func:`capture_features`);
* :mod:`.redo`: ReDo (:func:`dormant_masks`, :func:`recycle_dormant`);
* :mod:`.resets`: shrink-and-perturb (:func:`shrink_perturb`, :func:`fresh_init_like`),
  layer resets (:func:`reset_heads`, :func:`reset_all`), plasticity injection
  (:func:`inject_plasticity`);
* :mod:`.cbp`: continual backprop (:class:`ContinualBackprop`);
* :class:`CReLU` (in :mod:`baselines_sb3.networks`, where the trunks size after it).

Every function that draws random numbers takes an optional ``torch.Generator`` (default:
the global RNG) and documents the order of its draws.
"""

from baselines_sb3.networks import CReLU, width_factor
from baselines_sb3.remedies.cbp import INITS, ContinualBackprop, gnt_bound
from baselines_sb3.remedies.links import (
    Link,
    capture_features,
    policy_links,
    sequential_links,
)
from baselines_sb3.remedies.optim_state import forget, zero_entries
from baselines_sb3.remedies.redo import (
    dormant_masks,
    dormant_scores,
    kaiming_rows,
    policy_forward,
    recycle_dormant,
    recycle_units,
)
from baselines_sb3.remedies.resets import (
    fresh_init_like,
    init_scheme,
    inject_plasticity,
    reset_all,
    reset_heads,
    shrink_perturb,
)

__all__ = [
    "INITS",
    "CReLU",
    "ContinualBackprop",
    "Link",
    "capture_features",
    "dormant_masks",
    "dormant_scores",
    "forget",
    "fresh_init_like",
    "gnt_bound",
    "init_scheme",
    "inject_plasticity",
    "kaiming_rows",
    "policy_forward",
    "policy_links",
    "recycle_dormant",
    "recycle_units",
    "reset_all",
    "reset_heads",
    "sequential_links",
    "shrink_perturb",
    "width_factor",
    "zero_entries",
]
