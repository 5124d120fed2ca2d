"""`Optimizer`: a Keras-named optimizer specification that builds a Keras-rule torch optimizer.

A Keras optimizer is created before the model's parameters are known
(``optimizer=distrib.optimizers.SGD(learning_rate=0.001)`` in ``compile``).
A distrib optimizer is therefore a *spec*: it records Keras's
hyper-parameters and `build` turns it into a torch optimizer once the
parameters exist — a `KerasTorchOptimizer` subclass whose ``step`` computes
Keras 3's update (clipping, decoupled weight decay, EMA and the optimizer's
own rule; see `distrib.optimizers.keras_torch`). After `build` the spec also
behaves like that optimizer (``step``, ``zero_grad``, ``param_groups``,
``state_dict``), and its `learning_rate` reads and writes the torch param
groups, which is how callbacks such as `ReduceLROnPlateau` change it
mid-training.

Example:
    >>> opt = distrib.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    >>> torch_opt = opt.build(model.parameters())      # a KerasSGD (a torch.optim.Optimizer)
    >>> opt.learning_rate = 0.01                       # every param group's "lr" is now 0.01
    >>> torch_opt.param_groups[0]["lr"]
    0.01

Every step runs after torch's *global* step pre-hooks, where distrib's
strategies finish summing gradients across replicas
(`distrib.comm.optimizer_hook`): clipping and decay see the global gradient
and stay identical on every replica. A learning-rate schedule travels in the
param groups (as its config) and gives each step's rate from the step count
kept with the optimizer's state.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional

import torch

from distrib.optimizers import schedules
from distrib.optimizers.keras_torch import BASE_DEFAULTS, KerasTorchOptimizer, check_unit_interval
from distrib.optimizers.learning_rate import LearningRateValue
from distrib.optimizers.torch_surface import TorchOptimizerSurface

__all__ = ["Optimizer"]


def _check_nonneg(name: str, value: Optional[float], who: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{who}: {name} must be a number >= 0, got {value!r}")
    return float(value)


class Optimizer(TorchOptimizerSurface):
    """Base of the Keras-named optimizers; subclasses set `torch_class` and `_torch_kwargs`.

    Args:
        learning_rate: the learning rate: a float, or a `distrib.optimizers.schedules`
            schedule of the step (then ``learning_rate`` reads the current value).
        weight_decay: decoupled weight decay ``w -= w * weight_decay * lr`` before each update (None for none).
        clipnorm: clip each gradient tensor to this L2 norm.
        clipvalue: clip each gradient element to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        use_ema: keep an exponential moving average of the weights (Keras's EMA).
        ema_momentum: the average's momentum (``avg = m * avg + (1 - m) * w``); defaults to 0.99.
        ema_overwrite_frequency: overwrite the weights with the average every this many steps
            (None: only at the end of ``fit``, or by `finalize_variable_values`).
        loss_scale_factor: `scale_loss` multiplies the loss by it, the step divides the gradients by it.
        gradient_accumulation_steps: not supported (one clear error).
        name: the optimizer's name.
    """

    torch_class: type = KerasTorchOptimizer
    default_name = "optimizer"

    def __init__(self, learning_rate: float, *, weight_decay: Optional[float] = None,
                 clipnorm: Optional[float] = None, clipvalue: Optional[float] = None,
                 global_clipnorm: Optional[float] = None, use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: Optional[int] = None, loss_scale_factor: Optional[float] = None,
                 gradient_accumulation_steps: Optional[int] = None, name: Optional[str] = None) -> None:
        self.name = name or self.default_name
        who = type(self).__name__
        if isinstance(learning_rate, dict) and "schedule" in learning_rate:
            learning_rate = schedules.deserialize(learning_rate)
        self._schedule: Optional[schedules.LearningRateSchedule] = None
        if isinstance(learning_rate, schedules.LearningRateSchedule):
            self._schedule = learning_rate
            learning_rate = float(learning_rate(0))
        elif callable(learning_rate):
            raise TypeError(f"{who}: learning_rate must be a float or a distrib.optimizers.schedules schedule; "
                            "for a per-epoch function use distrib.callbacks.LearningRateScheduler")
        self._learning_rate = _check_nonneg("learning_rate", learning_rate, who)
        self.weight_decay = _check_nonneg("weight_decay", weight_decay, who)
        self.clipnorm = _check_nonneg("clipnorm", clipnorm, who)
        self.clipvalue = _check_nonneg("clipvalue", clipvalue, who)
        self.global_clipnorm = _check_nonneg("global_clipnorm", global_clipnorm, who)
        if sum(v is not None for v in (clipnorm, clipvalue, global_clipnorm)) > 1:
            raise ValueError(f"{who}: only one of clipnorm, clipvalue and global_clipnorm can be set")
        self.use_ema = bool(use_ema)
        self.ema_momentum = check_unit_interval(who, "ema_momentum", ema_momentum, closed=True)
        if ema_overwrite_frequency is not None and (isinstance(ema_overwrite_frequency, bool) or not isinstance(
                ema_overwrite_frequency, int) or ema_overwrite_frequency < 1):
            raise ValueError(f"{who}: ema_overwrite_frequency must be an int >= 1 or None, "
                             f"got {ema_overwrite_frequency!r}")
        self.ema_overwrite_frequency = ema_overwrite_frequency
        self.loss_scale_factor = _check_nonneg("loss_scale_factor", loss_scale_factor, who)
        if gradient_accumulation_steps not in (None, 1):
            raise ValueError(f"{who}: gradient_accumulation_steps is not supported by distrib; accumulate "
                             "with a larger global batch (or steps_per_execution) instead")
        self._torch: Optional[torch.optim.Optimizer] = None

    # ------------------------------------------------------------ build
    def _torch_kwargs(self) -> Dict[str, Any]:
        """The optimizer's own hyper-parameters as ``torch_class`` keyword arguments (besides ``lr``)."""
        return {}

    def _base_kwargs(self) -> Dict[str, Any]:
        return {"weight_decay": self.weight_decay, "clipnorm": self.clipnorm, "clipvalue": self.clipvalue,
                "global_clipnorm": self.global_clipnorm, "loss_scale_factor": self.loss_scale_factor,
                "use_ema": self.use_ema, "ema_momentum": self.ema_momentum,
                "ema_overwrite_frequency": self.ema_overwrite_frequency}

    def build(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        """Create the torch optimizer (a `KerasTorchOptimizer`) over ``params`` (parameters or param-group dicts).

        Building again over the same parameters returns the same optimizer;
        an optimizer cannot be shared between models.
        """
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}.build got no parameters; pass model.parameters() "
                             "of a model that has trainable parameters")
        if self._torch is not None:
            if _param_ids(params) == _param_ids(self._torch.param_groups):
                return self._torch
            raise ValueError(f"optimizer {self.name!r} is already built for other parameters; "
                             "create a new optimizer for each model")
        schedule = None if self._schedule is None else schedules.serialize(self._schedule)
        opt = self.torch_class(params, lr=self._learning_rate, learning_rate_schedule=schedule,
                               **self._base_kwargs(), **self._torch_kwargs())
        self._torch = opt
        return opt

    @property
    def built(self) -> bool:
        return self._torch is not None

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The built torch optimizer."""
        if self._torch is None:
            raise RuntimeError(f"optimizer {self.name!r} is not built yet: pass it to model.compile(...) "
                               "or call build(model.parameters())")
        return self._torch

    @property
    def iterations(self) -> int:
        """Steps taken so far (Keras's ``optimizer.iterations``)."""
        if self._torch is None:
            return 0
        steps = [int(s.get("step", 0)) for s in self._torch.state.values()]
        return max(steps, default=0)

    def scale_loss(self, loss: Any) -> Any:
        """``loss * loss_scale_factor`` (the loss itself when no factor is set), as Keras."""
        return loss if self.loss_scale_factor is None else loss * self.loss_scale_factor

    def finalize_variable_values(self, var_list: Any = None) -> None:
        """With ``use_ema``: set the weights to their moving averages (``fit`` calls it at the end)."""
        if self._torch is not None and isinstance(self._torch, KerasTorchOptimizer):
            self._torch.finalize_variable_values()

    # ---------------------------------------------------- learning rate
    @property
    def learning_rate(self) -> LearningRateValue:
        """The current learning rate (the first param group's once built).

        A float that also has Keras's ``.numpy()``, so
        ``model.optimizer.learning_rate.numpy()`` works as in Keras code.
        """
        if self._schedule is not None:
            return LearningRateValue(float(self._schedule(self.iterations)))
        if self._torch is None:
            return LearningRateValue(self._learning_rate)
        return LearningRateValue(float(self._torch.param_groups[0]["lr"]))

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        if self._schedule is not None:
            raise TypeError(f"{type(self).__name__}: learning_rate follows {type(self._schedule).__name__}; it "
                            "cannot be set (create the optimizer with a float to change it by hand or by callbacks)")
        value = _check_nonneg("learning_rate", float(value), type(self).__name__)
        self._learning_rate = value
        if self._torch is not None:
            self._set_group_lr(self._torch, value)

    @staticmethod
    def _set_group_lr(optimizer: torch.optim.Optimizer, value: float) -> None:
        for group in optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(value)
            else:
                group["lr"] = value

    lr = learning_rate

    # ------------------------------------------- torch optimizer surface
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        return self.torch_optimizer.step(closure)

    def state_dict(self) -> Dict[str, Any]:
        return self.torch_optimizer.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.torch_optimizer.load_state_dict(state_dict)

    def apply_gradients(self, grads_and_vars: Iterable[Any]) -> None:
        """Keras's custom-loop call: set each variable's ``.grad`` and step (builds on first use)."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if self._torch is None:
            self.build([v for _, v in pairs])
        for grad, var in pairs:
            var.grad = grad.detach().to(var.dtype)
        self.step()

    # ---------------------------------------------------------- config
    def get_config(self) -> Dict[str, Any]:
        """JSON-serialisable constructor arguments (the current learning rate included)."""
        lr: Any = self.learning_rate if self._schedule is None else schedules.serialize(self._schedule)
        return {"name": self.name, "learning_rate": lr, **self._base_kwargs()}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "Optimizer":
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()
                         if v is not None and not (k in BASE_DEFAULTS and v == BASE_DEFAULTS[k]))
        return f"{type(self).__name__}({args})"


def _param_ids(params: Iterable[Any]) -> List[int]:
    ids: List[int] = []
    for p in params:
        if isinstance(p, dict):
            ids.extend(id(q) for q in p["params"])
        else:
            ids.append(id(p))
    return ids
