// hello_regression: the smallest complete program on dtr's tensor core. It draws a
// random regression problem y = X·w + noise, then recovers w by gradient
// descent on the mean squared error, with the gradient written out by hand
// (2/n · Xᵀ(Xw − y)). The loss falls to the noise floor and the fitted weights
// match the true ones. (Autograd, modules and FSDP arrive in later layers; the
// FSDP training job will take this program's place.)
#include <dtr/dtr.h>

#include <fmt/format.h>

int main() {
  using namespace dtr;
  manual_seed(2024);
  const int64_t n = 8192, d = 32;
  const double noise = 0.05, lr = 0.1;

  Tensor x = randn({n, d});
  Tensor w_true = arange(d).view({d, 1}) / static_cast<double>(d) - 0.5;
  Tensor y = matmul(x, w_true) + randn({n, 1}) * noise;

  Tensor w = zeros({d, 1});
  fmt::print("fitting {} weights to {} samples by gradient descent\n", d, n);
  for (int step = 0; step <= 100; ++step) {
    Tensor residual = matmul(x, w) - y;
    double loss = mean(residual * residual).item();
    if (step % 10 == 0) fmt::print("step {:3d}  mse {:.6f}\n", step, loss);
    Tensor grad = matmul(x.t(), residual) * (2.0 / static_cast<double>(n));
    sub_(w, grad * lr);
  }
  double max_error = max(abs(w - w_true)).item();
  fmt::print("noise variance {:.6f}; largest weight error {:.4f}\n", noise * noise, max_error);
  if (max_error > 0.01) {
    DTR_LOG_ERROR("the fit did not converge (largest weight error {:.4f})", max_error);
    return 1;
  }
  return 0;
}
