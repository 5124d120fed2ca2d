"""Mixed precision, Keras-style: dtype policies and loss scaling.

Example:
    >>> distrib.mixed_precision.set_global_policy("mixed_bfloat16")
    >>> model.fit(dataset, epochs=3)     # forward under torch.autocast(bfloat16); float32 weights and loss
"""
from distrib.mixed_precision.loss_scale_optimizer import LossScaleOptimizer
from distrib.mixed_precision.policy import POLICY_NAMES, Policy, PolicyError, global_policy, set_global_policy

__all__ = ["Policy", "PolicyError", "POLICY_NAMES", "set_global_policy", "global_policy", "LossScaleOptimizer"]
