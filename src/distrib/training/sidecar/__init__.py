"""The side-car evaluator wing: `SidecarEvaluator` (`evaluator`) and what it remembers (`state`)."""
from distrib.training.sidecar.evaluator import EVAL_DIR, SidecarEvaluator, SidecarEvaluatorError

__all__ = ["SidecarEvaluator", "SidecarEvaluatorError", "EVAL_DIR"]
