"""distrib.hooks: the one place process-wide hooks are installed, idempotently."""
import sys

import pytest
import torch

from distrib import error_report, hooks


def test_the_same_optimizer_hook_installed_twice_runs_once_and_removes_cleanly():
    calls = []

    def before_step(optimizer, args, kwargs):
        calls.append(optimizer)

    first = hooks.optimizer_step_pre_hook(before_step)
    second = hooks.optimizer_step_pre_hook(before_step)
    try:
        assert first is second and first.installed
        param = torch.nn.Parameter(torch.ones(2))
        param.grad = torch.ones(2)
        optimizer = torch.optim.SGD([param], lr=0.1)
        optimizer.step()
        assert calls == [optimizer]
    finally:
        first.remove()
    assert not first.installed
    optimizer.step()
    assert calls == [optimizer]  # removed: not called again
    first.remove()  # a second remove does nothing


def test_bound_methods_of_two_objects_are_two_hooks():
    class Watcher:
        def __init__(self):
            self.seen = []

        def on_parameter(self, module, name, param):
            self.seen.append(name)

    a, b = Watcher(), Watcher()
    handles = [hooks.module_registration_hook("parameter", a.on_parameter),
               hooks.module_registration_hook("parameter", b.on_parameter),
               hooks.module_registration_hook("parameter", a.on_parameter)]
    try:
        assert handles[0] is handles[2] and handles[0] is not handles[1]
        torch.nn.Linear(2, 1)
    finally:
        for handle in handles:
            handle.remove()
    assert a.seen == ["weight", "bias"] and b.seen == ["weight", "bias"]
    torch.nn.Linear(2, 1)
    assert a.seen == ["weight", "bias"]


def test_a_bad_registration_kind_names_the_choices():
    with pytest.raises(ValueError, match="'parameter', 'buffer' or 'module', got 'grad'"):
        hooks.module_registration_hook("grad", print)


def test_install_excepthook_is_idempotent_and_keeps_the_previous_hook():
    saved_hook, saved_previous = sys.excepthook, error_report.previous_excepthook

    def user_hook(*exc_info):
        pass

    sys.excepthook = user_hook
    try:
        hooks.install_excepthook()
        hooks.install_excepthook()
        assert sys.excepthook is error_report.excepthook
        assert error_report.previous_excepthook is user_hook  # not the distrib hook itself
    finally:
        sys.excepthook, error_report.previous_excepthook = saved_hook, saved_previous


def test_one_line_error_helpers_are_still_importable_from_hooks():
    assert hooks.one_line is error_report.one_line and hooks.short_cause is error_report.short_cause


def test_a_process_group_built_again_does_not_stack_rank_prefixes_on_the_excepthook():
    """Elastic tasks build new groups at every resize; torch wraps sys.excepthook each time it does."""
    import sys

    from distrib import hooks

    before = sys.excepthook
    with hooks.excepthook_kept():
        sys.excepthook = lambda *args: before(*args)  # what init_process_group does, in short
    assert sys.excepthook is before
