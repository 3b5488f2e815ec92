// Tensor::to_string: a readable rendering for debugging, in the style of
// PyTorch's repr. Large tensors show the first and last 3 entries of each dim.
#include "dtr/tensor/tensor.h"

namespace dtr {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

void render(std::string& out, const Tensor& host, const std::vector<double>& values, int64_t dim,
            int64_t offset, bool summarize, bool floating) {
  const Shape& sizes = host.sizes();
  if (dim == host.dim()) {
    double v = values[offset];
    out += floating ? fmt::format("{:.4g}", v) : fmt::format("{}", static_cast<int64_t>(v));
    return;
  }
  // Row-major element count below this dim.
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < host.dim(); ++d) inner *= sizes[d];
  out += '[';
  int64_t n = sizes[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += "..., ";
      i = n - kEdgeItems - 1;
      continue;
    }
    render(out, host, values, dim + 1, offset + i * inner, summarize, floating);
    if (i + 1 < n) out += dim + 1 == host.dim() ? ", " : ",\n" + std::string(dim + 8, ' ');
  }
  out += ']';
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::string suffix = fmt::format("dtype={}, device={}", dtype(), device());
  if (device().is_meta()) return fmt::format("tensor(..., size={}, {})", shape_str(sizes()), suffix);
  Tensor host = to(DType::f64).to(Device::cpu()).contiguous();
  std::vector<double> values = host.to_vector<double>();
  std::string body;
  render(body, host, values, 0, 0, numel() > kSummarizeAbove, is_floating(dtype()));
  return fmt::format("tensor({}, {})", body, suffix);
}

}  // namespace dtr
