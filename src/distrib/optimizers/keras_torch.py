"""`KerasTorchOptimizer`: a ``torch.optim.Optimizer`` whose ``step`` computes Keras 3's update.

distrib's Keras-named optimizers (`distrib.optimizers.SGD`, ``Adam``, ...)
build one of these subclasses. It is a plain torch optimizer: it acts on
``torch.nn.Parameter`` objects, runs torch's step hooks (where distrib's
strategies finish summing gradients across replicas), keeps its slots in
``state[param]`` (so ``state_dict``/``load_state_dict``, checkpoints and the
parameter-server tasks handle it like any torch optimizer), and every
hyper-parameter is a param-group entry (so a ``ps`` task rebuilds it as
``cls(groups, **defaults)`` and the learning rate a callback sets travels
with each step).

One ``step`` does what Keras 3's ``Optimizer.apply`` does, in Keras's order:

1. gradients are cast to the parameter's dtype and divided by
   ``loss_scale_factor`` (if set);
2. clipped: ``clipnorm`` per tensor, else ``global_clipnorm`` over all
   gradients of the optimizer, else ``clipvalue`` element-wise;
3. decoupled weight decay ``w -= w * weight_decay * lr``;
4. the optimizer's own rule (`update`), with ``step`` = Keras's
   ``iterations + 1`` and the learning rate ``lr``, or
   ``learning_rate_schedule(iterations)`` when the group has a schedule
   (its JSON config, so it travels to ps tasks and into checkpoints);
5. with ``use_ema``: the moving average of the weights, overwriting the
   weights every ``ema_overwrite_frequency`` steps.

The gradients in ``param.grad`` are left as they were. Keras counts
``iterations`` per optimizer; here each parameter counts its own steps
(``state[p]["step"]``), which is the same number whenever every parameter
gets a gradient at every step (the parameter-server tasks each hold only
some parameters, so a per-parameter count is what they can keep).

Example:
    >>> opt = KerasSGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> loss.backward(); opt.step()        # velocity = 0.9 * velocity - lr * g; w += velocity
"""
from __future__ import annotations

import json
import math
import operator
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

from distrib.optimizers import schedules

__all__ = ["KerasTorchOptimizer", "BASE_DEFAULTS"]

#: Keras's base-optimizer options and their defaults (every subclass accepts them).
BASE_DEFAULTS: Dict[str, Any] = {
    "weight_decay": None,
    "clipnorm": None,
    "clipvalue": None,
    "global_clipnorm": None,
    "loss_scale_factor": None,
    "use_ema": False,
    "ema_momentum": 0.99,
    "ema_overwrite_frequency": None,
    "learning_rate_schedule": None,
}


_DTYPE, _SHAPE = operator.attrgetter("dtype"), operator.attrgetter("shape")
_STEP, _NUMEL = operator.itemgetter("step"), operator.methodcaller("numel")
_IS_SPARSE, _IS_COMPLEX = operator.attrgetter("is_sparse"), operator.methodcaller("is_complex")
_flatten, _unflatten = torch._C._nn.flatten_dense_tensors, torch._C._nn.unflatten_dense_tensors

#: Tensors with fewer elements than this take `_step_flat` (the per-tensor kernel launch dominates their cost).
FLAT_NUMEL = 1 << 15
#: Larger tensors are stepped in chunks of this many elements (1 MiB of float32).
CHUNK_NUMEL = 1 << 18


class KerasTorchOptimizer(torch.optim.Optimizer):
    """Base class: subclasses define `init_state` and `update` (one parameter, one step).

    Args:
        params: parameters or param-group dicts.
        defaults: every hyper-parameter (``lr`` included); `BASE_DEFAULTS` fill the missing ones.
    """

    def __init__(self, params: Iterable[Any], defaults: Dict[str, Any]) -> None:
        super().__init__(params, {**BASE_DEFAULTS, **defaults})

    # ------------------------------------------------------------ subclass API
    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        """The slots of a parameter before its first step (zeros of its shape, usually)."""
        return {}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        """Apply Keras's ``update_step`` to ``p`` in place (``step`` is Keras's ``iterations + 1``)."""
        raise NotImplementedError

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        """`update` for many dense parameters of one device and dtype at once (``torch._foreach_*`` ops).

        Overriding it is optional (without it `step` calls `update` per parameter); an override
        must round exactly as `update` does, op for op, and every tensor slot must have its
        parameter's shape (`step` may pass flat concatenations or chunks of them).
        """
        raise NotImplementedError

    def _schedule_of(self, group: Dict[str, Any]) -> Any:
        """The group's learning-rate schedule (kept in the group as its JSON config), or None."""
        config = group.get("learning_rate_schedule")
        if config is None:
            return None
        key = json.dumps(config, sort_keys=True)
        cache = self.__dict__.setdefault("_schedules", {})
        if key not in cache:
            cache[key] = schedules.deserialize(config)
        return cache[key]

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = []  # (group, params, grads)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            if list(map(_DTYPE, grads)) != list(map(_DTYPE, params)):
                grads = [g.to(p.dtype) for p, g in zip(params, grads)]
            factor = group.get("loss_scale_factor")
            if factor is not None:
                grads = [g / factor for g in grads]
            work.append((group, params, grads))
        _clip(work)
        for group, params, grads in work:
            if params:
                self._step_group(group, params, grads)
        return loss

    def _step_group(self, group: Dict[str, Any], params: List[torch.Tensor], grads: List[torch.Tensor]) -> None:
        """One group's step: one `update_foreach` per (device, dtype) bucket, else `update` per parameter."""
        states = [self.state[p] for p in params]
        if not all(states):
            for p, state in zip(params, states):
                if not state:
                    state.update(self.init_state(p, group))
                    state["step"] = 0
                    if group.get("use_ema"):
                        state["average"] = torch.zeros_like(p)
        try:
            counts = set(map(_STEP, states))
        except KeyError:
            state = next(s for s in states if "step" not in s)
            raise ValueError(f"{type(self).__name__}: the loaded optimizer state has slots {sorted(state)}, not "
                             f"this optimizer's {sorted(self.init_state(params[0], group)) + ['step']} (a "
                             "checkpoint of another optimizer class?)") from None
        if (len(counts) != 1 or type(self).update_foreach is KerasTorchOptimizer.update_foreach
                or any(map(_IS_SPARSE, grads)) or any(map(_IS_COMPLEX, params))):
            self._step_each(group, params, grads, states)
            return
        iterations = int(counts.pop())
        schedule = self._schedule_of(group)
        lr = float(schedule(iterations)) if schedule is not None else float(group["lr"])
        buckets = _group_tensors_by_device_and_dtype([params, grads], with_indices=True)
        for (ps, gs), indices in buckets.values():
            sts = [states[i] for i in indices] if len(buckets) > 1 else states
            if ps[0].device.type != "cpu":  # torch's foreach kernels already batch launches there
                self._step_lists(ps, gs, sts, group, iterations, lr)
                continue
            sizes = list(map(_NUMEL, ps))
            small = [i for i, n in enumerate(sizes) if n < FLAT_NUMEL]
            if len(small) == len(ps):
                self._step_flat(ps, gs, sts, group, iterations, lr)
            elif len(small) > 1:
                large = [i for i, n in enumerate(sizes) if n >= FLAT_NUMEL]
                self._step_flat([ps[i] for i in small], [gs[i] for i in small], [sts[i] for i in small],
                                group, iterations, lr)
                self._step_chunked([ps[i] for i in large], [gs[i] for i in large], [sts[i] for i in large],
                                   group, iterations, lr)
            else:
                self._step_chunked(ps, gs, sts, group, iterations, lr)
        for state in states:
            state["step"] = iterations + 1
        if schedule is not None:
            group["lr"] = lr

    def _step_lists(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                    group: Dict[str, Any], iterations: int, lr: float) -> None:
        """Weight decay, `update_foreach` and the moving average over parameters of one device and dtype."""
        wd = group.get("weight_decay")
        if wd:
            decay = torch._foreach_mul(params, wd)
            torch._foreach_mul_(decay, lr)
            torch._foreach_sub_(params, decay)
        self.update_foreach(params, grads, states, group, iterations + 1, lr)
        if group.get("use_ema"):
            _update_ema_foreach(params, [s["average"] for s in states], group, iterations)

    def _step_chunked(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                      group: Dict[str, Any], iterations: int, lr: float) -> None:
        """`_step_lists` on cache-sized chunks of large contiguous tensors, one chunk at a time.

        All of a chunk's ops run while it is in cache (Keras's rules take more passes than
        torch's fused ones; over whole tensors each pass would go to memory).
        """
        slots = [key for key, value in states[0].items() if torch.is_tensor(value)]
        tensors = [params, grads] + [[s[key] for s in states] for key in slots]
        if not all(t.is_contiguous() for members in tensors for t in members):
            self._step_lists(params, grads, states, group, iterations, lr)
            return
        chunks = [[c for t in members for c in t.view(-1).split(CHUNK_NUMEL)] for members in tensors]
        for i in range(len(chunks[0])):
            state = {key: chunks[2 + j][i] for j, key in enumerate(slots)}
            self._step_lists([chunks[0][i]], [chunks[1][i]], [state], group, iterations, lr)

    def _step_flat(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                   group: Dict[str, Any], iterations: int, lr: float) -> None:
        """`_step_lists` on one concatenation of many small tensors, copied back (one kernel per op, not per tensor).

        Element-wise ops round each element alike whatever the tensor's shape, so the
        numbers are those of the per-tensor ops.
        """
        slots = [key for key, value in states[0].items() if torch.is_tensor(value)]
        tensors = {key: [s[key] for s in states] for key in slots}
        tensors["params"] = params
        flat = {}
        for key, members in tensors.items():
            flat[key], views = self._flat_buffer(id(group), key, members)
            torch._foreach_copy_(views, members)
        flat_params = flat.pop("params")
        self._step_lists([flat_params], [_flatten(grads)], [flat], group, iterations, lr)
        flat["params"] = flat_params
        for key, members in tensors.items():
            torch._foreach_copy_(members, self._flat_buffer(id(group), key, members)[1])

    def _flat_buffer(self, group_id: int, key: str, members: List[torch.Tensor]) -> Any:
        """A kept scratch buffer with one view per member (rebuilt when their shapes change; not in ``state``)."""
        cache = self.__dict__.setdefault("_flat", {})
        ids = (members[0].dtype, members[0].device, tuple(map(_SHAPE, members)))
        entry = cache.get((group_id, key))
        if entry is None or entry[0] != ids:
            buffer = _flatten(members)
            entry = cache[(group_id, key)] = (ids, buffer, _unflatten(buffer, members))
        return entry[1], entry[2]

    def _step_each(self, group: Dict[str, Any], params: List[torch.Tensor], grads: List[torch.Tensor],
                   states: List[Dict[str, Any]]) -> None:
        """The per-parameter step (sparse or complex tensors, parameters at different step counts)."""
        schedule = self._schedule_of(group)
        wd = group.get("weight_decay")
        lr = float(group["lr"])
        for p, g, state in zip(params, grads, states):
            iterations = int(state["step"])
            if schedule is not None:
                lr = float(schedule(iterations))
            if wd:
                p.sub_(p * wd * lr)
            self.update(p, g, state, group, iterations + 1, lr)
            if group.get("use_ema"):
                _update_ema(p, state, group, iterations)
            state["step"] = iterations + 1
        if schedule is not None:
            group["lr"] = lr

    def finalize_variable_values(self) -> None:
        """With ``use_ema``: overwrite each parameter with its moving average (Keras does this after ``fit``)."""
        with torch.no_grad():
            for group in self.param_groups:
                if not group.get("use_ema"):
                    continue
                for p in group["params"]:
                    average = self.state.get(p, {}).get("average")
                    if average is not None:
                        p.copy_(average)


def _clip(work: List[Any]) -> None:
    """Keras's ``_clip_gradients`` over every group's gradients (replaced in ``work``)."""
    all_grads = [g for _, _, grads in work for g in grads]
    if not all_grads:
        return
    first = work[0][0]
    if first.get("global_clipnorm"):
        clip_norm = float(first["global_clipnorm"])
        norm = torch.sqrt(torch.stack([torch.sum(torch.square(g)).to(torch.float32) for g in all_grads]).sum())
        scale = clip_norm * torch.minimum(1.0 / norm, torch.tensor(1.0 / clip_norm)) + (norm - norm)
        for index, (group, params, grads) in enumerate(work):
            work[index] = (group, params, [g * scale.to(g.dtype) for g in grads])
        return
    for index, (group, params, grads) in enumerate(work):
        if group.get("clipnorm"):
            work[index] = (group, params, [_clip_by_norm(g, float(group["clipnorm"])) for g in grads])
        elif group.get("clipvalue"):
            v = float(group["clipvalue"])
            work[index] = (group, params, [g.clamp(-v, v) for g in grads])


def _clip_by_norm(g: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """``tf.clip_by_norm``: ``g * clip_norm / max(||g||, clip_norm)`` (a zero gradient stays zero)."""
    l2sum = torch.sum(torch.square(g))
    l2norm = torch.where(l2sum > 0, torch.sqrt(torch.where(l2sum > 0, l2sum, torch.ones_like(l2sum))), l2sum)
    return g * clip_norm / torch.clamp(l2norm, min=clip_norm)


def _update_ema(p: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any], iterations: int) -> None:
    momentum = float(group["ema_momentum"]) if iterations != 0 else 0.0
    average = state["average"]
    average.copy_(momentum * average + (1.0 - momentum) * p)
    frequency = group.get("ema_overwrite_frequency")
    if frequency and (iterations + 1) % int(frequency) == 0:
        p.copy_(average)


def _update_ema_foreach(params: List[torch.Tensor], averages: List[torch.Tensor], group: Dict[str, Any],
                        iterations: int) -> None:
    """`_update_ema` over many parameters (the same float32 roundings)."""
    momentum = float(group["ema_momentum"]) if iterations != 0 else 0.0
    new = torch._foreach_mul(averages, momentum)
    torch._foreach_add_(new, torch._foreach_mul(params, 1.0 - momentum))
    torch._foreach_copy_(averages, new)
    frequency = group.get("ema_overwrite_frequency")
    if frequency and (iterations + 1) % int(frequency) == 0:
        torch._foreach_copy_(params, averages)


def check_unit_interval(who: str, name: str, value: float, closed: bool = False) -> float:
    """``value`` as a float in ``[0, 1)`` (``[0, 1]`` when ``closed``), else one ValueError line."""
    value = float(value)
    if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0) or math.isnan(value):
        raise ValueError(f"{who}: {name} must be in [0, 1{']' if closed else ')'}, got {value!r}")
    return value
