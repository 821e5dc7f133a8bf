// torch.einsum as PyTorch computes it without opt_einsum (aten/src/ATen/native/Linear.cpp: einsum
// and sumproduct_pair), in three steps:
//   1. parse the equation into each operand's labels and, after "->", the output's;
//   2. give every label one dim of a common layout (the output's dims first, then the labels
//      summed out) and align each operand to it: a diagonal for a label repeated in the operand,
//      a size-1 dim for a label it lacks, then one permute;
//   3. contract left to right. A dim that no later operand has is summed inside the pair's
//      batched matmul (lro, lo, sum) · (lro, sum, ro), or beforehand when only one side has it.
// Every step is a differentiable op (diagonal, unsqueeze, permute, sum, reshape, matmul, mul,
// view), so einsum's backward is theirs: the adjoint of a contraction is matmul's backward, a
// contraction again; diagonals scatter back; broadcast size-1 dims sum back.
#include <array>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/ops/common.h"

namespace tg {

namespace {

constexpr int kLetters = 26;
constexpr int kLabels = 2 * kLetters;
constexpr int kEllipsis = kLabels;  // stands for "..." in a term's labels

bool is_label(unsigned char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
// 'A'..'Z' -> 0..25, 'a'..'z' -> 26..51: in index order uppercase comes first, as in PyTorch's
// implicit output.
int label_index(unsigned char c) { return c <= 'Z' ? c - 'A' : c - 'a' + kLetters; }
char label_char(int l) { return char(l < kLetters ? 'A' + l : 'a' + l - kLetters); }

template <class... Args>
[[noreturn]] void fail_eq(const std::string& text, const Args&... parts) {
  detail::fail("einsum", "equation '", text, "': ", parts...);
}

struct Equation {
  std::string text;
  std::vector<std::vector<int>> inputs;  // per operand: label indices, kEllipsis for "..."
  bool explicit_output = false;
  std::vector<int> output;
};

// The labels of one term, text[begin, end); `who` names the term in errors.
std::vector<int> parse_term(const std::string& text, size_t begin, size_t end,
                            const std::string& who) {
  std::vector<int> labels;
  bool ellipsis = false;
  for (size_t i = begin; i < end; ++i) {
    const unsigned char c = text[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (i + 2 >= end || text[i + 1] != '.' || text[i + 2] != '.')
        fail_eq(text, who, " has a '.' at index ", i, " that is not part of an ellipsis '...'");
      if (ellipsis) fail_eq(text, who, " has more than one ellipsis '...'");
      ellipsis = true;
      labels.push_back(kEllipsis);
      i += 2;
    } else if (is_label(c)) {
      labels.push_back(label_index(c));
    } else {
      fail_eq(text, who, " has the invalid subscript '", c, "' at index ", i,
              "; subscripts must be in [a-zA-Z]");
    }
  }
  return labels;
}

Equation parse(const std::string& text, size_t num_operands) {
  Equation eq{text, {}, false, {}};
  const size_t arrow = text.find("->");
  const size_t lhs_end = arrow == std::string::npos ? text.size() : arrow;
  for (size_t begin = 0;;) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos || comma > lhs_end) comma = lhs_end;
    eq.inputs.push_back(
        parse_term(text, begin, comma, "operand " + std::to_string(eq.inputs.size())));
    if (comma == lhs_end) break;
    begin = comma + 1;
  }
  if (eq.inputs.size() != num_operands)
    fail_eq(text, "names ", eq.inputs.size(), " operand(s) but ", num_operands,
            " tensor(s) were given");
  if (arrow != std::string::npos) {
    eq.explicit_output = true;
    eq.output = parse_term(text, arrow + 2, text.size(), "the output");
  }
  return eq;
}

void check_operands(const Equation& eq, const std::vector<Tensor>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].defined()) fail_eq(eq.text, "operand ", i, " is an undefined tensor");
    if (!is_floating(ops[i].dtype()))
      fail_eq(eq.text, "operand ", i, " is ", dtype_name(ops[i].dtype()),
              "; einsum takes floating-point tensors");
    if (ops[i].dtype() != ops[0].dtype())
      fail_eq(eq.text, "operand ", i, " is ", dtype_name(ops[i].dtype()), " but operand 0 is ",
              dtype_name(ops[0].dtype()));
  }
}

// Where each label sits in the aligned operands: the output's dims come first (the ellipsis
// dims where "..." stands, or first when the output is implicit), the summed-out dims after.
struct Layout {
  std::array<int64_t, kLabels> pos;  // -1 for a label the equation does not use
  std::array<int, kLabels> count{};  // appearances in the inputs
  int64_t ell_dims = 0;              // dims covered by the widest ellipsis
  int64_t ell_pos = 0;               // the first of them
  int64_t out_dims = 0;              // dims [0, out_dims) are the output's
  int64_t total = 0;
};

// Counts labels and measures the ellipses, checking each operand's subscripts against its dims.
void count_labels(const Equation& eq, const std::vector<Tensor>& ops, Layout& L) {
  for (size_t i = 0; i < ops.size(); ++i) {
    int64_t nlabels = 0;
    bool ellipsis = false;
    for (int l : eq.inputs[i]) {
      if (l == kEllipsis) {
        ellipsis = true;
      } else {
        ++nlabels;
        ++L.count[size_t(l)];
      }
    }
    const int64_t ndim = ops[i].dim();
    if (ellipsis ? nlabels > ndim : nlabels != ndim)
      fail_eq(eq.text, "operand ", i, " has ", nlabels, " subscript(s)",
              ellipsis ? " besides its ellipsis" : "", " but ", ndim, " dim(s) (shape ",
              shape_str(ops[i].shape()), ")");
    if (ellipsis) L.ell_dims = std::max(L.ell_dims, ndim - nlabels);
  }
}

Layout make_layout(const Equation& eq, const std::vector<Tensor>& ops) {
  Layout L;
  L.pos.fill(-1);
  count_labels(eq, ops, L);
  int64_t p = 0;
  bool ell_in_output = !eq.explicit_output;
  if (!eq.explicit_output) {  // implicit: the ellipsis dims, then the labels seen once
    p = L.ell_dims;
    for (int l = 0; l < kLabels; ++l)
      if (L.count[size_t(l)] == 1) L.pos[size_t(l)] = p++;
  }
  for (int l : eq.output) {
    if (l == kEllipsis) {
      L.ell_pos = p;
      p += L.ell_dims;
      ell_in_output = true;
    } else if (L.count[size_t(l)] == 0) {
      fail_eq(eq.text, "output subscript ", label_char(l), " does not appear in any operand");
    } else if (L.pos[size_t(l)] != -1) {
      fail_eq(eq.text, "output subscript ", label_char(l), " appears more than once");
    } else {
      L.pos[size_t(l)] = p++;
    }
  }
  L.out_dims = p;
  if (!ell_in_output) {  // the ellipsis dims are summed out
    L.ell_pos = p;
    p += L.ell_dims;
  }
  for (int l = 0; l < kLabels; ++l)
    if (L.count[size_t(l)] > 0 && L.pos[size_t(l)] == -1) L.pos[size_t(l)] = p++;
  L.total = p;
  return L;
}

// The size every label and ellipsis dim has where it is not 1, and in how many aligned operands
// each layout dim is not 1: a dim is summed out once a single operand holds it.
struct Sizes {
  std::array<int64_t, kLabels> label;
  Shape ell;
  std::vector<int> nontrivial;
  explicit Sizes(const Layout& L) : ell(size_t(L.ell_dims), 1), nontrivial(size_t(L.total), 0) {
    label.fill(1);
  }
};

// Moves t's last dim to position d.
Tensor move_last_to(const Tensor& t, int64_t d) {
  Shape perm;
  for (int64_t i = 0; i < t.dim() - 1; ++i) {
    if (i == d) perm.push_back(t.dim() - 1);
    perm.push_back(i);
  }
  if (d == t.dim() - 1) perm.push_back(d);
  return t.permute(perm);
}

// Operand i as a tensor of L.total dims: dim L.pos[l] holds label l (size 1 where the operand
// lacks it), dims ell_pos... its ellipsis dims, right-aligned. Records sizes in `sz`.
Tensor align(const Equation& eq, const Layout& L, size_t i, const Tensor& operand, Sizes& sz) {
  const std::vector<int>& labels = eq.inputs[i];
  const int64_t covered = operand.dim() - int64_t(labels.size()) + 1;  // by the ellipsis
  auto note = [&](int64_t& known, int64_t size, int64_t at, const auto&... what) {
    if (size == 1) return;
    if (known != 1 && known != size)
      fail_eq(eq.text, what..., " has size ", size, " in operand ", i, " (shape ",
              shape_str(operand.shape()), ") but size ", known, " elsewhere");
    known = size;
    ++sz.nontrivial[size_t(at)];
  };
  Shape perm(size_t(L.total), -1);
  Tensor op = operand;
  int64_t dim = 0;
  for (int l : labels) {
    if (l == kEllipsis) {
      for (int64_t j = L.ell_dims - covered; j < L.ell_dims; ++j, ++dim) {
        note(sz.ell[size_t(j)], op.size(dim), L.ell_pos + j, "the ellipsis dim ", dim);
        perm[size_t(L.ell_pos + j)] = dim;
      }
    } else if (int64_t& at = perm[size_t(L.pos[size_t(l)])]; at == -1) {
      note(sz.label[size_t(l)], op.size(dim), L.pos[size_t(l)], "subscript ", label_char(l));
      at = dim++;
    } else {  // a repeated label: its diagonal, where the label first stood
      if (op.size(dim) != op.size(at))
        fail_eq(eq.text, "subscript ", label_char(l), " is repeated in operand ", i, " (shape ",
                shape_str(operand.shape()), ") with sizes ", op.size(at), " and ", op.size(dim));
      op = move_last_to(diagonal(op, 0, at, dim), at);
    }
  }
  for (int64_t& p : perm)
    if (p == -1) {
      op = op.unsqueeze(dim);
      p = dim++;
    }
  return op.permute(perm);
}

// (a * b) summed over sum_dims, where both are not 1, keeping every dim: the operands are
// permuted to (lro, lo, sum) and (lro, sum, ro) for one batched matmul, lro being the dims both
// have, lo and ro those only one has.
Tensor sumproduct_pair(Tensor a, Tensor b, const Shape& sum_dims) {
  if (sum_dims.empty()) return mul(a, b);
  const int64_t ndim = a.dim();
  std::vector<bool> summed(size_t(ndim), false);
  for (int64_t d : sum_dims) summed[size_t(d)] = true;
  Shape lro, lo, ro;
  int64_t lro_size = 1, lo_size = 1, ro_size = 1, sum_size = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    const bool in_a = a.size(d) != 1, in_b = b.size(d) != 1;
    if (summed[size_t(d)]) {
      if (in_a && in_b)
        sum_size *= a.size(d);
      else if (in_a)
        a = sum(a, d, true);
      else if (in_b)
        b = sum(b, d, true);
    } else if (in_a && in_b) {
      lro.push_back(d), lro_size *= a.size(d);
    } else if (in_a) {
      lo.push_back(d), lo_size *= a.size(d);
    } else {
      ro.push_back(d), ro_size *= b.size(d);
    }
  }
  auto concat = [](std::initializer_list<const Shape*> parts) {
    Shape out;
    for (const Shape* s : parts) out.insert(out.end(), s->begin(), s->end());
    return out;
  };
  const Shape lperm = concat({&lro, &lo, &sum_dims, &ro}),
              rperm = concat({&lro, &sum_dims, &ro, &lo});
  Shape out_size, operm(static_cast<size_t>(ndim), 0);
  for (size_t k = 0; k < lperm.size(); ++k) {
    const int64_t d = lperm[k];
    out_size.push_back(summed[size_t(d)] ? 1 : (a.size(d) != 1 ? a.size(d) : b.size(d)));
    operm[size_t(d)] = int64_t(k);
  }
  const Tensor left = a.permute(lperm).reshape({lro_size, lo_size, sum_size});
  const Tensor right = b.permute(rperm).reshape({lro_size, sum_size, ro_size});
  return matmul(left, right).view(out_size).permute(operm);
}

// Left to right, as PyTorch without a path: each step sums what no later operand needs.
Tensor contract(const std::vector<Tensor>& ops, const Layout& L, std::vector<int> nontrivial) {
  Tensor result = ops[0];
  for (size_t k = 1; k < ops.size(); ++k) {
    Tensor a = result, b = ops[k];
    Shape sum_dims, a_only, b_only;
    for (int64_t d = L.out_dims; d < L.total; ++d) {
      int& n = nontrivial[size_t(d)];
      if (a.size(d) != 1 && b.size(d) != 1) {
        if (--n == 1) sum_dims.push_back(d), n = 0;
      } else if (n == 1) {
        if (a.size(d) != 1)
          a_only.push_back(d), n = 0;
        else if (b.size(d) != 1)
          b_only.push_back(d), n = 0;
      }
    }
    if (!a_only.empty()) a = sum(a, a_only, true);
    if (!b_only.empty()) b = sum(b, b_only, true);
    result = sumproduct_pair(a, b, sum_dims);
  }
  if (L.total == L.out_dims) return result;
  if (ops.size() > 1)  // every summed dim is 1 by now
    return result.view(Shape(result.shape().begin(), result.shape().begin() + L.out_dims));
  Shape rest;
  for (int64_t d = L.out_dims; d < L.total; ++d) rest.push_back(d);
  return sum(result, rest);
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  const Equation eq = parse(equation, operands.size());
  check_operands(eq, operands);
  const Layout L = make_layout(eq, operands);
  Sizes sz(L);
  std::vector<Tensor> aligned;
  for (size_t i = 0; i < operands.size(); ++i) aligned.push_back(align(eq, L, i, operands[i], sz));
  return contract(aligned, L, sz.nontrivial);
}

}  // namespace tg
