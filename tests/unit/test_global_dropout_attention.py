"""Global-batch dropout inside ``torch.nn.functional.scaled_dot_product_attention``.

In a multi-replica step with ``dropout_p > 0`` distrib computes the attention
with torch's math formula and drops its weights by each example's global row,
so the same global batch on one replica or split over 2 or 3 gives the same
outputs and gradients; everywhere else torch's own function runs.
"""
import math

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from distrib.data.distribution import batch_position
from distrib.data.distribution.batch_position import RowPosition
from distrib.strategies import context
from distrib.strategies.layer_patches import global_dropout
from test_global_dropout import _as_replicas, _Owner

#: torch's function as torch defines it (``F.scaled_dot_product_attention`` is this object until distrib replaces it).
TORCH_SDPA = torch._C._nn.scaled_dot_product_attention
P = 0.5
#: ``enable_gqa`` (grouped-query attention) came with torch 2.5; before it torch's function has no such argument.
HAS_GQA = torch.__version__ >= "2.5"
needs_gqa = pytest.mark.skipif(not HAS_GQA, reason="torch < 2.5: scaled_dot_product_attention has no enable_gqa")


def _masked_row_is_zero() -> bool:
    """Whether torch's function gives a query that sees no key a zero output (torch >= 2.5; before: NaN).

    distrib's keyed path gives zero on every torch, so on older ones the cases leave such rows out.
    """
    q = torch.ones(1, 1, 2)
    return not torch.isnan(TORCH_SDPA(q, q, q, torch.zeros(1, 1, dtype=torch.bool))).any().item()


MASKED_ROW_IS_ZERO = _masked_row_is_zero()


def _cases(names):
    return [pytest.param(n, marks=needs_gqa) if n == "gqa" else n for n in names]


@pytest.fixture(autouse=True)
def _installed():
    global_dropout.install_functional_dropout()
    yield
    batch_position.set_current(None)


def _replica(parts, r, **options):
    """The stand-in strategy of replica ``r`` when ``parts`` replicas share the batch (2 for the whole batch)."""
    strategy = _Owner(**options)
    strategy.num_replicas_in_sync, strategy.replica_id = max(parts, 2), r
    return strategy


def _outputs_and_grads(parts, forward, leaves, rows, options=None):
    """Each replica's ``forward(lo, hi)`` on its rows, as `strategy.run` would call it, with a per-example loss.

    Returns the outputs concatenated and the leaves' gradients, summed over the
    replicas as the all-reduce would sum them.
    """
    for leaf in leaves:
        leaf.grad = None
    outs = []
    for r, lo, hi in _as_replicas(rows, parts, seed=11):
        with context.replica_context(_replica(parts, r, **(options or {}))):
            out = forward(lo, hi)
        out.square().sum().backward()
        outs.append(out.detach())
    return torch.cat(outs), [leaf.grad.clone() for leaf in leaves]


def _assert_same(a, b):
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def _qkv(shape_q, shape_kv, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in (shape_q, shape_kv, shape_kv)]


def _sdpa_case(name):
    """``(leaves, forward(lo, hi))`` for a 6-example batch of one kind of attention call."""
    n, h, l, s, e = 6, 2, 4, 5, 3
    if name == "gqa":
        q, k, v = _qkv((n, 2 * h, l, e), (n, h, s, e))
        return [q, k, v], lambda lo, hi: F.scaled_dot_product_attention(q[lo:hi], k[lo:hi], v[lo:hi], dropout_p=P,
                                                                         enable_gqa=True)
    if name == "extra dims":
        q, k, v = _qkv((n, 3, h, l, e), (n, 3, h, s, e))
        return [q, k, v], lambda lo, hi: F.scaled_dot_product_attention(q[lo:hi], k[lo:hi], v[lo:hi], dropout_p=P)
    q, k, v = _qkv((n, h, l, e), (n, h, s, e))
    masks = {"plain": None, "bool mask": torch.rand(l, s, generator=torch.Generator().manual_seed(1)) > 0.3,
             "float mask": torch.randn(n, 1, l, s, dtype=torch.float64), "causal": None}
    mask = masks[name]

    def forward(lo, hi):
        m = mask[lo:hi] if mask is not None and mask.dim() == 4 else mask
        return F.scaled_dot_product_attention(q[lo:hi], k[lo:hi], v[lo:hi], m, P, is_causal=name == "causal")
    return [q, k, v], forward


@pytest.mark.parametrize("case", _cases(["plain", "bool mask", "float mask", "causal", "gqa", "extra dims"]))
@pytest.mark.parametrize("parts", [2, 3])
def test_attention_split_any_way_gives_the_whole_batchs_outputs_and_gradients(case, parts):
    leaves, forward = _sdpa_case(case)
    whole = _outputs_and_grads(1, forward, leaves, 6)
    split = _outputs_and_grads(parts, forward, leaves, 6)
    _assert_same(split[0], whole[0])
    for a, b in zip(split[1], whole[1]):
        _assert_same(a, b)
    own = _outputs_and_grads(parts, forward, leaves, 6, {"global_batch_dropout": False})
    assert not torch.allclose(own[0], whole[0], atol=1e-3), "torch's own masks depend on the split"


class _Attention(torch.nn.Module):
    """``MultiheadAttention`` as ``TransformerEncoderLayer`` calls it: ``need_weights=False``."""

    def __init__(self, batch_first):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(8, 2, dropout=P, batch_first=batch_first, dtype=torch.float64)

    def forward(self, x, padding):
        out, weights = self.mha(x, x, x, key_padding_mask=padding, need_weights=False)
        assert weights is None
        return out


def _layer(kind):
    torch.manual_seed(0)
    if kind == "encoder layer":
        return torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=P, batch_first=True, dtype=torch.float64)
    if kind == "decoder layer":
        return torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=P, batch_first=True, dtype=torch.float64)
    return _Attention(batch_first=kind == "attention, batch first")


def _module_forward(kind, module, x, padding):
    """``forward(lo, hi)`` on rows ``lo:hi`` of the global batch ``x`` (batch first) and its padding mask."""
    def forward(lo, hi):
        if kind == "encoder layer":
            return module(x[lo:hi], src_key_padding_mask=padding[lo:hi])
        if kind == "decoder layer":
            return module(x[lo:hi], x[lo:hi].flip(1), tgt_is_causal=True,
                          tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], dtype=x.dtype),
                          memory_key_padding_mask=padding[lo:hi])
        if kind == "attention, batch first":
            return module(x[lo:hi], padding[lo:hi])
        return module(x[lo:hi].transpose(0, 1), padding[lo:hi]).transpose(0, 1)
    return forward


def _batch(rows=6, length=5):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(rows, length, 8, generator=g, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(rows, length, dtype=torch.bool)
    padding[1, 3:] = padding[-1, 4:] = True
    return x, padding


@pytest.mark.parametrize("kind", ["attention, batch first", "attention, sequence first", "encoder layer",
                                  "decoder layer"])
@pytest.mark.parametrize("parts", [2, 3])
def test_torchs_attention_layers_in_training_split_any_way_alike(kind, parts):
    module = _layer(kind).train()
    x, padding = _batch()
    leaves = [x, *module.parameters()]
    forward = _module_forward(kind, module, x, padding)
    whole = _outputs_and_grads(1, forward, leaves, 6)
    split = _outputs_and_grads(parts, forward, leaves, 6)
    _assert_same(split[0], whole[0])
    for a, b in zip(split[1], whole[1]):
        _assert_same(a, b)
    module.eval()
    with torch.no_grad():
        undropped = forward(0, 6)
    assert not torch.allclose(whole[0], undropped, atol=1e-3), "the masks dropped something"


def test_mha_attention_goes_through_the_keyed_attention_only_without_its_weights(monkeypatch):
    calls = {"attention": 0, "dropout ranks": []}
    keyed_attention, keyed_dropout = global_dropout._keyed_attention, global_dropout._keyed_dropout

    def count_attention(*args, **kwargs):
        calls["attention"] += 1
        return keyed_attention(*args, **kwargs)

    def count_dropout(x, *args, **kwargs):
        calls["dropout ranks"].append(x.dim())
        return keyed_dropout(x, *args, **kwargs)
    monkeypatch.setattr(global_dropout, "_keyed_attention", count_attention)
    monkeypatch.setattr(global_dropout, "_keyed_dropout", count_dropout)
    mha = torch.nn.MultiheadAttention(8, 2, dropout=P, batch_first=True).train()
    x = torch.randn(4, 5, 8)
    batch_position.set_current(RowPosition(0, 4))
    with context.replica_context(_replica(2, 0)):
        mha(x, x, x)  # need_weights=True: F.dropout on the (batch * heads, L, S) weights
        assert calls == {"attention": 0, "dropout ranks": [3]}
        mha(x, x, x, need_weights=False)  # scaled_dot_product_attention: (batch, heads, L, S) weights
        assert calls == {"attention": 1, "dropout ranks": [3, 4]}


def test_a_zero_rate_and_evaluation_run_torchs_own_function_bit_for_bit(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the keyed attention ran")
    monkeypatch.setattr(global_dropout, "_keyed_attention", refuse)
    q, k, v = (torch.randn(3, 2, 4, 8) for _ in range(3))
    x, padding = _batch(3)
    x = x.detach().float()
    encoder = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=P, batch_first=True).eval()
    mha = torch.nn.MultiheadAttention(8, 2, dropout=P, batch_first=True).eval()
    with torch.no_grad():
        expected = [TORCH_SDPA(q, k, v, dropout_p=0.0, is_causal=True), encoder(x, src_key_padding_mask=padding),
                    mha(x, x, x, need_weights=False)[0]]
    batch_position.set_current(RowPosition(0, 3))
    with context.replica_context(_replica(2, 0)), torch.no_grad():
        got = [F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True),
               encoder(x, src_key_padding_mask=padding), mha(x, x, x, need_weights=False)[0]]
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


@pytest.mark.parametrize("where", ["outside a step", "one replica", "told not to"])
def test_outside_a_multi_replica_step_torchs_own_dropout_runs(where):
    q, k, v = (torch.randn(3, 2, 4, 8) for _ in range(3))
    torch.manual_seed(5)
    expected = TORCH_SDPA(q, k, v, dropout_p=P)
    torch.manual_seed(5)
    batch_position.set_current(RowPosition(0, 3))
    if where == "outside a step":
        got = F.scaled_dot_product_attention(q, k, v, dropout_p=P)
    else:
        strategy = _replica(2, 0, global_batch_dropout=where != "told not to")
        strategy.num_replicas_in_sync = 1 if where == "one replica" else 2
        with context.replica_context(strategy):
            got = F.scaled_dot_product_attention(q, k, v, dropout_p=P)
    assert torch.equal(got, expected)


def _keyed(monkeypatch, *args, **kwargs):
    """The keyed path with every element kept, scaled back by ``1 - P``: torch's attention without dropout."""
    monkeypatch.setattr(global_dropout, "keyed_keep_mask", lambda shape, *a, **kw: torch.ones(shape, dtype=torch.bool))
    batch_position.set_current(RowPosition(0, args[0].shape[0]))
    with context.replica_context(_replica(2, 0)):
        return F.scaled_dot_product_attention(*args, dropout_p=P, **kwargs) * (1 - P)


def _math_cases():
    g = torch.Generator().manual_seed(3)

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)
    q, k, v = t(2, 3, 4, 6), t(2, 3, 5, 6), t(2, 3, 5, 7)
    bool_mask = torch.rand(4, 5, generator=g) > 0.4
    float_mask = t(2, 1, 4, 5)
    if MASKED_ROW_IS_ZERO:
        bool_mask[2] = False  # a query that sees no key: torch gives it weights 0, not NaN
        float_mask[0, 0, 1] = float("-inf")
    return {
        "plain": ((q, k, v), {}),
        "scale": ((q, k, v), {"scale": 0.37}),
        "bool mask": ((q, k, v, bool_mask), {}),
        "float mask": ((q, k, v, float_mask), {}),
        "causal, target shorter": ((q, k, v), {"is_causal": True}),
        "causal, target longer": ((t(2, 3, 6, 6), k, v), {"is_causal": True}),
        "gqa": ((t(2, 6, 4, 6), k, v), {"enable_gqa": True}),
        "extra dims": ((t(2, 2, 3, 4, 6), t(2, 2, 3, 5, 6), t(2, 2, 3, 5, 7)), {}),
        "broadcast batch": ((q, k[:1], v[:1]), {}),
        "unbatched": ((q[0, 0], k[0, 0], v[0, 0]), {}),
    }


@pytest.mark.parametrize("case", _cases(_math_cases()))
def test_the_keyed_path_computes_torchs_attention_and_gradients(monkeypatch, case):
    args, kwargs = _math_cases()[case]
    theirs = [a.clone().requires_grad_(a.dtype.is_floating_point) for a in args]
    mine = [a.clone().requires_grad_(a.dtype.is_floating_point) for a in args]
    expected = TORCH_SDPA(*theirs, **kwargs)
    got = _keyed(monkeypatch, *mine, **kwargs)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    weights = torch.randn(expected.shape, dtype=torch.float64)
    (expected * weights).sum().backward()
    (got * weights).sum().backward()
    for a, b in zip(mine, theirs):
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32_and_returned_in_its_dtype(monkeypatch, dtype):
    q, k, v = (torch.randn(2, 2, 8, 64).to(dtype) for _ in range(3))
    got = _keyed(monkeypatch, q, k, v)
    assert got.dtype == dtype
    expected = TORCH_SDPA(*(t.float() for t in (q, k, v)))
    rounding = expected.abs() * torch.finfo(dtype).eps / 2 + 1e-6  # only the float32 result's rounding
    assert ((got.float() - expected).abs() <= rounding).all()


def test_elements_are_kept_with_probability_one_minus_p_and_scaled_by_its_inverse():
    n, heads, length = 64, 4, 64
    q = k = torch.zeros(n, heads, length, 8)  # equal scores: every weight is 1 / length
    v = torch.eye(length).expand(n, heads, length, length)  # the output is the dropped weights themselves
    batch_position.set_current(RowPosition(0, n))
    with context.replica_context(_replica(2, 0)):
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    kept = out != 0
    fraction, count = kept.double().mean().item(), out.numel()
    assert abs(fraction - 0.7) < 5 * (0.3 * 0.7 / count) ** 0.5
    torch.testing.assert_close(out[kept], torch.full((int(kept.sum()),), 1 / length / 0.7))


def test_invalid_arguments_raise_as_torchs_own_function_does():
    q, k, v = (torch.randn(2, 4, 3, 8) for _ in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool)
    bad_calls = [((q, k, v, mask), {"is_causal": True}),
                 *([((q, k[:, :3], v[:, :3]), {"enable_gqa": True})] if HAS_GQA else []),
                 ((q, k[:, :2], v[:, :2]), {}),
                 ((q, k, v.double()), {}),
                 ((q, k, v, mask.int()), {}),
                 ((q, k[..., :5], v), {})]
    batch_position.set_current(RowPosition(0, 2))
    for args, kwargs in bad_calls:
        with pytest.raises(RuntimeError) as theirs:
            TORCH_SDPA(*args, dropout_p=P, **kwargs)
        with context.replica_context(_replica(2, 0)), pytest.raises(RuntimeError) as ours:
            F.scaled_dot_product_attention(*args, dropout_p=P, **kwargs)
        assert str(ours.value) == str(theirs.value)
    with context.replica_context(_replica(2, 0)), pytest.raises(RuntimeError, match="dropout probability"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.5)


def test_recomputation_under_activation_checkpointing_drops_alike():
    q, k, v = _qkv((4, 2, 5, 3), (4, 2, 5, 3))
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(11)
        batch_position.set_current(RowPosition(0, 4))
        with context.replica_context(_replica(2, 0)):  # the step's backward runs in it too
            def call(*t):
                return F.scaled_dot_product_attention(*t, dropout_p=P)
            if checkpointed:
                out = torch.utils.checkpoint.checkpoint(call, q, k, v, use_reentrant=False)
            else:
                out = call(q, k, v)
            batch_position.set_current(RowPosition(0, 1))  # another step's place, when the backward recomputes
            out.square().sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v)])
        for t in (q, k, v):
            t.grad = None
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script is deprecated, not gone
def test_torchscript_still_compiles_torchs_attention_layers():
    layer = torch.jit.script(torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=P, batch_first=True).train())
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        out = layer(x)
    assert out.shape == x.shape and math.isfinite(float(out.sum()))
