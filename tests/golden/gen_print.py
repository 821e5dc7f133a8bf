#!/usr/bin/python3
# Regenerates print_cases.txt, the golden file for tests/test_print.cpp: for each tensor, the
# inputs tg::format_tensor receives (options, shape, kind, grad_fn, leaf requires_grad, values)
# and torch's repr of it. Needs /usr/bin/python3 with torch, only to regenerate; the C++ test
# reads the committed file. Run from anywhere: /usr/bin/python3 tests/golden/gen_print.py
import math
import os
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "print_cases.txt")
KIND = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.bool: "bool"}
DEFAULT_OPTS = dict(precision=4, threshold=1000, edgeitems=3, linewidth=80)

cases = []


def add(name, t, **opts):
    """Records t's repr under the given print options (torch defaults otherwise)."""
    o = dict(DEFAULT_OPTS, **opts)
    torch.set_printoptions(**o)
    text = repr(t)
    torch.set_printoptions(profile="default")
    flat = t.detach().reshape(-1).tolist()
    if t.dtype.is_floating_point:
        # Bit pattern of the value as a double (float32 widens exactly): no decimal round trip.
        vals = ["%016x" % struct.unpack(">Q", struct.pack(">d", v))[0] for v in flat]
    else:
        vals = [str(int(v)) for v in flat]
    grad_fn = type(t.grad_fn).__name__ if t.grad_fn is not None else "-"
    leaf_rg = int(t.grad_fn is None and t.requires_grad)
    lines = text.split("\n")
    cases.append(
        "case %s\noptions %d %d %d %d\nshape%s\nkind %s\ngrad_fn %s\nrequires_grad %d\n"
        "values%s\nrepr %d\n%s\n"
        % (name, o["precision"], o["threshold"], o["edgeitems"], o["linewidth"],
           "".join(" %d" % n for n in t.shape), KIND[t.dtype], grad_fn, leaf_rg,
           "".join(" " + v for v in vals), len(lines), "\n".join(lines)))


torch.manual_seed(123)
f64 = torch.float64
inf, nan = math.inf, math.nan

# 0-d
add("scalar_f32", torch.tensor(0.4421))
add("scalar_one", torch.tensor(1.0))
add("scalar_negzero", torch.tensor(-0.0))
add("scalar_nan", torch.tensor(nan))
add("scalar_neginf", torch.tensor(-inf))
add("scalar_tiny", torch.tensor(1e-5))
add("scalar_big", torch.tensor(123456789.0))
add("scalar_int", torch.tensor(7))
add("scalar_int_neg", torch.tensor(-42))
add("scalar_bool", torch.tensor(True))
add("scalar_f64", torch.tensor(2.5, dtype=f64))
add("scalar_f64_leaf", torch.tensor(-3.25, dtype=f64, requires_grad=True))
add("scalar_sum_grad", torch.rand(3, requires_grad=True).sum())

# 1-D
add("vec_scores", torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]))
add("vec_negative", torch.tensor([-0.0739, 0.0713, -12.5, 3.0]))
add("vec_intfloat", torch.tensor([1.0, 0.0, 2.0, -3.0]))
add("vec_intfloat_wide", torch.tensor([1.0, 20000.0, -3.0]))
add("vec_intfloat_huge", torch.tensor([1e9, 2.0]))
add("vec_sci_small", torch.tensor([1e-5, 0.5, 1.0]))
add("vec_sci_ratio", torch.tensor([0.01, 123.5]))
add("vec_sci_big", torch.tensor([1.5e8, 2.25e8]))
add("vec_sci_f64", torch.tensor([1e-300, 1e300, -2.5], dtype=f64))
add("vec_no_sci_ratio_1000", torch.tensor([0.1, 100.0, 0.5]))
add("vec_nonfinite", torch.tensor([0.25, nan, inf, -inf]))
add("vec_nonfinite_int", torch.tensor([1.0, nan, -inf, 2.0]))
add("vec_negative_nan", torch.tensor([-nan, 1.5, -nan]))  # Python prints "nan", never "-nan"
add("vec_nonfinite_only", torch.tensor([nan, inf, -inf]))
add("vec_nonfinite_sci", torch.tensor([1e-6, nan, -inf, 3.0]))
add("vec_negzero", torch.tensor([-0.0, 0.0, 1.5]))
add("vec_negzero_int", torch.tensor([-0.0, 0.0, 1.0]))
add("vec_zeros", torch.zeros(4))
add("vec_ties", torch.tensor([0.00005, 0.00015, 0.12345, 0.5], dtype=f64))
add("vec_round_up", torch.tensor([9.99996, 0.5]))
add("vec_wrap", torch.randn(30))
add("vec_wrap_f64", torch.randn(25, dtype=f64))
add("vec_int", torch.arange(3))
add("vec_int_wrap", torch.arange(-20, 40))
add("vec_int_big", torch.tensor([-9223372036854775808, 0, 9223372036854775807]))
add("vec_bool", torch.tensor([True, False, True]))
add("vec_bool_true", torch.tensor([True, True]))
add("vec_leaf", torch.randn(5, requires_grad=True))
add("vec_wrap_grad", (torch.randn(30, requires_grad=True) * 2))
add("vec_wrap_leaf_f64", torch.randn(16, dtype=f64, requires_grad=True))

# 2-D
inputs = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                       [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
add("mat_inputs", inputs)
add("mat_scores", inputs @ inputs.T)
w = torch.rand(3, 2, requires_grad=True)
add("mat_mm_grad", inputs @ w)
scores = inputs @ torch.rand(3, 6, requires_grad=True)
add("mat_softmax_grad", torch.softmax(scores, dim=-1))
mask = torch.triu(torch.ones(6, 6), diagonal=1)
add("mat_masked_inf", scores.masked_fill(mask.bool(), -inf))
add("mat_tril", torch.tril(torch.ones(6, 6)))
add("mat_wrap", torch.randn(4, 15))
add("mat_wrap_grad", torch.randn(3, 12, requires_grad=True) + 1)
add("mat_int", torch.tensor([[1, -20, 3], [400, 5, 6]]))
add("mat_bool", torch.tensor([[True, False], [False, False]]))
add("mat_f64_grad", torch.rand(3, 3, dtype=f64, requires_grad=True) * 3)
add("mat_f64_leaf", torch.rand(2, 2, dtype=f64, requires_grad=True))
add("mat_sci", torch.tensor([[1e-7, 1.0], [2.0, -3e5]]))

# 3-D and 4-D
add("t3_small", torch.randn(2, 6, 2))
add("t3_grad", torch.randn(2, 3, 4, requires_grad=True) * 1)
add("t3_wrap", torch.randn(2, 2, 20))
add("t3_int", torch.arange(24).reshape(2, 3, 4))
add("t4_small", torch.rand(1, 2, 3, 4))
add("t4_f64_grad", torch.rand(2, 2, 2, 3, dtype=f64, requires_grad=True).exp())
add("t4_bool", torch.rand(2, 1, 2, 3) > 0.5)

# empty
add("empty_1d", torch.empty(0))
add("empty_2d", torch.empty(0, 3))
add("empty_3d", torch.empty(2, 0, 4))
add("empty_int", torch.empty(0, dtype=torch.int64))
add("empty_int_2d", torch.empty(3, 0, dtype=torch.int64))
add("empty_bool", torch.empty(0, 2, dtype=torch.bool))
add("empty_f64_leaf", torch.empty(0, dtype=f64, requires_grad=True))
add("empty_leaf", torch.empty(1, 0, requires_grad=True))

# summarized (more than 1000 elements)
add("sum_arange_f", torch.arange(2000.0))
hidden = torch.randn(2000)
hidden[1000] = 1e10  # not printed, so it must not switch on sci mode
add("sum_hidden_big", hidden)
add("sum_mat", torch.randn(40, 40))
add("sum_3d", torch.randn(3, 20, 20))
add("sum_3d_all", torch.randn(10, 10, 11))
add("sum_4d", torch.randn(2, 10, 10, 10))
add("sum_int", torch.arange(1001))
add("sum_bool", torch.rand(30, 40) > 0.5)
add("sum_grad", torch.randn(50, 30, requires_grad=True) * 1e-5)
add("sum_exact_threshold", torch.randn(1000))

# boundaries of the mode rules (ratio 1000, max 1e8, min 1e-4; float32 1e-4 is just below it)
add("edge_int_ratio_1000", torch.tensor([1.0, 1000.0]))
add("edge_int_ratio_1001", torch.tensor([1.0, 1001.0]))
add("edge_ratio_1000", torch.tensor([0.5, 500.0]))
add("edge_ratio_above", torch.tensor([0.5, 500.5]))
add("edge_max_1e8", torch.tensor([1e8, 5e7], dtype=f64))
add("edge_max_above_1e8", torch.tensor([100000001.0, 5e7], dtype=f64))
add("edge_min_1e-4_f64", torch.tensor([1e-4, 0.05], dtype=f64))
add("edge_min_1e-4_f32", torch.tensor([1e-4, 0.05]))
add("edge_min_5e-5", torch.tensor([5e-5, 0.02]))

# where the suffix and the elements wrap: sweep lengths across the 80-column limit
for n in range(5, 12):
    add("edge_leaf_len%d" % n, torch.rand(n, requires_grad=True))
    add("edge_grad_len%d" % n, torch.rand(n, requires_grad=True) * 1)
for n in range(7, 11):
    add("edge_wrap_len%d" % n, torch.randn(n))
    add("edge_wrap_rows%d" % n, torch.randn(2, n, dtype=f64))
for n in range(60, 66):
    add("edge_f64_leaf_len%d" % n, torch.zeros(n // 6, dtype=f64, requires_grad=True) + n)

# non-default print options
add("opt_precision2", torch.randn(3, 3), precision=2)
add("opt_precision0", torch.tensor([1.5, 2.5, -0.25]), precision=0)
add("opt_precision8_sci", torch.tensor([1e-6, 1.0], dtype=f64), precision=8)
add("opt_linewidth40", torch.randn(3, 9, requires_grad=True) * 2, linewidth=40)
add("opt_linewidth10", torch.randn(2, 4), linewidth=10)
add("opt_threshold10", torch.arange(12.0).reshape(3, 4), threshold=10, edgeitems=1)
add("opt_threshold10_vec", torch.arange(20), threshold=10, edgeitems=2)

with open(OUT, "w") as fh:
    fh.write("# Generated by gen_print.py with torch %s; do not edit.\n" % torch.__version__)
    fh.write("".join(cases))
print("wrote %d cases to %s" % (len(cases), OUT))
