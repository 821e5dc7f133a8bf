#include "nn/attention_checks.h"

#include <sstream>
#include <stdexcept>
#include <string>

namespace tg::nn::detail {

void check_attention_input(const char* module, const Tensor& x, int64_t rank, int64_t d_in,
                           int64_t context_length) {
  std::ostringstream os;
  os << module << ": ";
  const char* layout = rank == 2 ? "(num_tokens, d_in)" : "(b, num_tokens, d_in)";
  if (!x.defined()) {
    os << "got an undefined input tensor";
    throw std::invalid_argument(os.str());
  }
  if (x.dim() != rank) {
    os << "expected a " << rank << "-D input " << layout << " with d_in = " << d_in << ", got a "
       << x.dim() << "-D tensor of shape " << shape_str(x.shape());
    throw std::invalid_argument(os.str());
  }
  if (x.size(-1) != d_in) {
    os << "input " << layout << " of shape " << shape_str(x.shape()) << " has d_in = " << x.size(-1)
       << ", but the module was built with d_in = " << d_in;
    throw std::invalid_argument(os.str());
  }
  if (context_length >= 0 && x.size(-2) > context_length) {
    os << "input " << layout << " of shape " << shape_str(x.shape())
       << " has num_tokens = " << x.size(-2) << ", more than context_length = " << context_length
       << " (the causal mask is " << context_length << "x" << context_length << ")";
    throw std::invalid_argument(os.str());
  }
}

int64_t checked_head_dim(const char* module, int64_t d_out, int64_t num_heads,
                         const char* assert_text) {
  if (num_heads < 1)
    throw std::invalid_argument(std::string(module) + ": num_heads must be >= 1, got " +
                                std::to_string(num_heads));
  if (d_out % num_heads != 0)  // the book's assert, checked before anything is drawn
    throw std::invalid_argument(std::string(module) + ": " + assert_text +
                                " (d_out=" + std::to_string(d_out) +
                                ", num_heads=" + std::to_string(num_heads) + ")");
  return d_out / num_heads;
}

int64_t checked_context_length(const char* module, int64_t context_length) {
  if (context_length < 1)
    throw std::invalid_argument(std::string(module) + ": context_length must be >= 1, got " +
                                std::to_string(context_length));
  return context_length;
}

}  // namespace tg::nn::detail
