"""What `Strategy.scope()` does to modules: placement, initial sync, gradient sync.

While a scope is open, every parameter and buffer registered by any module
constructor in this thread is captured and marked *pending*. Pending tensors
are moved to the strategy's device and (on a multi-replica strategy)
broadcast from replica 0 (the chief's) before they are first used: when the
scope closes, when `Strategy.run` starts, or at the first module forward,
whichever comes first, so every replica starts from identical weights whatever
it seeded its RNG with — and from the weights the same seed gives on the CPU
(a constructor initialises its parameters after registering them, so moving
them at registration would draw them from the GPU's generator). Parameters that require gradients are then handed to
the strategy's `GradientSynchronizer`, which sums their gradients across
replicas before any optimizer steps them (frozen ones included: they are
summed from the step they are unfrozen). Non-trainable floating state
(buffers, ``requires_grad=False`` parameters) is averaged after each step it
changed (`distrib.comm.state_sync`), and torch BatchNorm layers normalise
with global-batch statistics (`distrib.strategies.layer_patches.batch_norm`), so N
replicas keep the weights and running statistics one process would; torch
Dropout layers drop by each example's place in the global batch
(`distrib.strategies.layer_patches.global_dropout`), so their masks do not depend on the
number of replicas. Keras 3 layers are not torch submodules of their model:
they are adopted when built in the scope (their variables' dict registers) or
given to `track_module`, and their ``BatchNormalization``, seeded dropout and
noise layers become global-batch too (`distrib.strategies.layer_patches.keras_global_layers`);
in an elastic job the random preprocessing layers found in them are named in
a warning, before the first step.

Example:
    >>> with strategy.scope():
    ...     model = torch.nn.Linear(3, 1)      # captured, pending
    >>> # scope closed: weights broadcast from the chief, grads now summed
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import TYPE_CHECKING, Dict, Iterator, List, Protocol, Tuple

import torch
from torch.nn.parameter import is_lazy

from distrib import hooks
from distrib.comm.optimizer_hook import register_unreplicated
from distrib.strategies import context
from distrib.strategies.layer_patches.batch_norm import synchronize_batch_norm
from distrib.strategies.layer_patches.global_dropout import install_functional_dropout, use_global_batch_dropout
from distrib.strategies.layer_patches.keras_global_layers import adopt_keras_layer, is_keras_layer, random_preprocessing_layers
from distrib.strategies.layer_patches.share_warning import say_if_a_resize_changes_the_result

if TYPE_CHECKING:  # pragma: no cover
    from distrib.comm.collective import Collective
    from distrib.comm.grad_sync import GradientSynchronizer
    from distrib.comm.options import CommunicationOptions

__all__ = ["ScopeTracker", "ScopeOwner"]


class ScopeOwner(Protocol):
    """What a `ScopeTracker` needs of the strategy that owns it (a replicated or central-storage one)."""

    device: torch.device
    collective: "Collective"
    communication_options: "CommunicationOptions"

    def _gradient_synchronizer(self) -> "GradientSynchronizer": ...

_Slot = Tuple["weakref.ref[torch.nn.Module]", str, str]  # (module, kind, name)


class ScopeTracker:
    """Captures modules created in a strategy's scope and keeps replicas in sync."""

    def __init__(self, strategy: ScopeOwner) -> None:
        self._strategy = strategy
        self._depth = 0
        self._lock = threading.RLock()
        self._pending: List[_Slot] = []
        self._tracked_param_ids: Dict[int, None] = {}
        self._tracked_params: "List[weakref.ref[torch.nn.Parameter]]" = []
        self._hooks: list = []
        self._forward_hook = None
        self._unaveraged: "List[weakref.ref[torch.Tensor]]" = []
        self._lazy: Dict[int, List[_Slot]] = {}  # lazy modules' tensors waiting for their first forward
        self._lazy_hooks: Dict[int, "torch.utils.hooks.RemovableHandle"] = {}
        self._unsaid: Dict[str, None] = {}  # Keras random layers found and not named yet (in order)
        self._said: set = set()

    @property
    def _replicated(self) -> bool:
        return self._strategy.collective.distributed

    # ------------------------------------------------------------ capture
    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The strategy's ``scope()``: current strategy, capture while the outermost is open, sync on leaving.

        Scopes nest; leaving restores the previous strategy. Parameters and
        buffers registered inside are moved to the strategy's device and (with
        several replicas) made identical on every replica when the outermost
        scope closes or the first `run`/forward needs them.
        """
        context.push(self._strategy)
        self._depth += 1
        if self._depth == 1:
            self._start_capture()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._stop_capture()
            context.pop(self._strategy)
            if self._depth == 0:
                self.synchronize()

    def _start_capture(self) -> None:
        self._hooks = [
            hooks.module_registration_hook("parameter", self._on_parameter),
            hooks.module_registration_hook("buffer", self._on_buffer),
            hooks.module_registration_hook("module", self._on_submodule),
        ]

    def _stop_capture(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _captures_here(self) -> bool:
        return context.current_scope_strategy() is self._strategy and context.in_cross_replica_context()

    def _on_parameter(self, module: torch.nn.Module, name: str, param):
        if param is not None and self._captures_here():
            self._add_pending(module, "param", name)
        return None

    def _on_buffer(self, module: torch.nn.Module, name: str, buffer):
        if buffer is not None and self._captures_here():
            self._add_pending(module, "buffer", name)
        return None

    def _place(self, module: torch.nn.Module, kind: str, name: str, t: torch.Tensor) -> torch.Tensor:
        """Move a captured tensor to the strategy's device (a parameter keeps its identity: optimizers
        made in the scope hold it).

        A constructor registers a parameter *before* it initialises it, so it is
        left where the constructor made it until first needed: initialised by the
        same generator as without a strategy, a module has the same initial weights
        on a GPU as on the CPU (the values `module.to(device)` would give).
        """
        device = self._strategy.device
        if t.device == device or is_lazy(t):
            return t
        with torch.no_grad():
            moved = t.detach().to(device)
        if kind == "buffer":
            module._buffers[name] = moved
            return moved
        if torch._has_compatible_shallow_copy_type(t, moved):  # CPU -> CUDA: what module.to() does
            t.data = moved
            return t
        param = torch.nn.Parameter(moved, requires_grad=t.requires_grad)  # e.g. meta: a new parameter
        module._parameters[name] = param
        return param

    def _on_submodule(self, parent: torch.nn.Module, name: str, module):
        if module is not None and self._captures_here():
            self._adopt_layer(module)
            if is_keras_layer(parent):  # a Keras layer registers its variables' dict once built
                self._adopt_layer(parent)
        return None

    def _adopt_layer(self, module: torch.nn.Module) -> None:
        """Layers that depend on the replicas' shares: dropout (`global_dropout`), Keras's (`keras_global_layers`)."""
        if not self._replicated:
            return
        options = self._strategy.communication_options
        if options.global_batch_dropout:
            use_global_batch_dropout(module, weakref.ref(self._strategy))
            install_functional_dropout()
        if is_keras_layer(module):
            statistics = adopt_keras_layer(module, weakref.ref(self._strategy), sync_batch_norm=options.sync_batch_norm,
                                           global_batch_dropout=options.global_batch_dropout)
            self._unaveraged += [weakref.ref(t) for t in statistics]
            self._note_share_dependent(module)

    def _note_share_dependent(self, layer: torch.nn.Module) -> None:
        """Note Keras random preprocessing layers in an elastic job, for `_say_share_dependent`."""
        from distrib.comm.elastic import elastic_enabled

        if elastic_enabled():
            self._unsaid.update((name, None) for name in random_preprocessing_layers(layer) if name not in self._said)

    def _say_share_dependent(self) -> None:
        """Name the Keras random layers not named yet in the one-line elastic warning (replica 0).

        Not while a scope is open: Keras builds a model by calling its layers,
        whose first forward synchronizes before the later layers are found.
        """
        if not self._unsaid or self._depth > 0:
            return
        unsaid, self._unsaid = list(self._unsaid), {}
        self._said.update(unsaid)
        say_if_a_resize_changes_the_result(self._strategy, None, unsaid)

    def _add_pending(self, module: torch.nn.Module, kind: str, name: str) -> None:
        with self._lock:
            self._pending.append((weakref.ref(module), kind, name))
            moves = self._strategy.device.type != "cpu"
            if (self._replicated or moves) and self._forward_hook is None:
                self._forward_hook = hooks.module_forward_pre_hook(self._on_first_forward)

    def _on_first_forward(self, module, args):
        self.synchronize()

    def track_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Adopt a module created outside the scope: place it and sync it (idempotent)."""
        module.to(self._strategy.device)
        for mod in module.modules():
            self._adopt_layer(mod)
            for name, p in mod._parameters.items():
                if p is not None and id(p) not in self._tracked_param_ids:
                    self._add_pending(mod, "param", name)
            for name, b in mod._buffers.items():
                if b is not None:
                    self._add_pending(mod, "buffer", name)
        return module

    # -------------------------------------------------------------- sync
    def synchronize(self) -> None:
        """Broadcast pending tensors from replica 0 and hand parameters to gradient sync.

        First, in an elastic job, say which Keras random layers adopted since
        the last call tie the result to the replicas' shares.
        """
        self._say_share_dependent()
        with self._lock:
            if not self._pending:
                return
            pending, self._pending = self._pending, []
            if self._forward_hook is not None:
                self._forward_hook.remove()
                self._forward_hook = None
        tensors: List[torch.Tensor] = []
        new_params: List[torch.nn.Parameter] = []
        modules: Dict[int, torch.nn.Module] = {}
        seen = set()
        for ref, kind, name in pending:
            mod = ref()
            if mod is None:
                continue
            modules.setdefault(id(mod), mod)
            t = (mod._parameters if kind == "param" else mod._buffers).get(name)
            if t is None or id(t) in seen:
                continue
            if is_lazy(t):
                self._wait_for_materialization(mod, (ref, kind, name))
                continue
            t = self._place(mod, kind, name, t)
            seen.add(id(t))
            tensors.append(t)
            if kind == "param" and id(t) not in self._tracked_param_ids:
                self._tracked_param_ids[id(t)] = None
                self._tracked_params.append(weakref.ref(t))
                new_params.append(t)
        if not self._replicated:
            if new_params:  # a one-replica strategy's model trains alone, also in a worker of a larger job
                register_unreplicated(new_params)
            return
        _broadcast_coalesced(self._strategy.collective, tensors)
        sync = self._strategy._gradient_synchronizer()
        sync.add_parameters(new_params)
        state = sync.state
        if state is not None:
            state.add(tensors)
        unaveraged, self._unaveraged = [t for t in (r() for r in self._unaveraged) if t is not None], []
        if state is not None and unaveraged:
            state.exclude(unaveraged)
        if self._strategy.communication_options.sync_batch_norm:
            strategy_ref = weakref.ref(self._strategy)
            for mod in modules.values():
                if synchronize_batch_norm(mod, strategy_ref) and state is not None:
                    state.exclude([t for t in (mod.running_mean, mod.running_var) if t is not None])

    def _wait_for_materialization(self, module: torch.nn.Module, slot: _Slot) -> None:
        """Keep a lazy module's tensor pending until its first forward gives it a shape.

        torch's ``LazyLinear``/``LazyConv2d``/``LazyBatchNorm2d`` (Keras's deferred
        build) create their parameters in a forward pre-hook registered at
        construction; this hook, registered later, runs right after it, so the
        new tensors are placed and broadcast before the layer computes.
        """
        with self._lock:
            waiting = self._lazy.setdefault(id(module), [])
            waiting.append(slot)
            if id(module) not in self._lazy_hooks:
                self._lazy_hooks[id(module)] = module.register_forward_pre_hook(self._on_materialized)

    def _on_materialized(self, module: torch.nn.Module, args: tuple) -> None:
        with self._lock:
            handle = self._lazy_hooks.pop(id(module), None)
            slots = self._lazy.pop(id(module), [])
            self._pending.extend(slots)
        if handle is not None:
            handle.remove()
        self.synchronize()

    def tracked_parameters(self) -> List[torch.nn.Parameter]:
        return [p for p in (r() for r in self._tracked_params) if p is not None]


def _broadcast_coalesced(collective, tensors: List[torch.Tensor]) -> None:
    """Broadcast ``tensors`` from replica 0 with one message per dtype."""
    by_dtype: Dict[Tuple[torch.dtype, torch.device], List[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault((t.dtype, t.device), []).append(t)
    for group in by_dtype.values():
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            flat = collective.broadcast(flat, src=0)
            offset = 0
            for t in group:
                n = t.numel()
                t.detach().copy_(flat[offset:offset + n].view_as(t))
                offset += n
