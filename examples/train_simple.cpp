// train_simple: a model defined and trained in about twenty lines — the
// seed documents' SimpleModel learning a synthetic 10-class problem with AdamW.
#include <dtr/dtr.h>
#include <dtr/nn/simple_model.h>

#include <fmt/format.h>

int main() {
  using namespace dtr;
  manual_seed(0);
  Tensor x = randn({512, 64});
  Tensor labels = argmax(x.narrow(1, 0, 10), 1);  // class = the largest of the first 10 features
  nn::SimpleModel model(64, 128, 10);
  nn::optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  for (int step = 0; step <= 200; ++step) {
    Tensor loss = cross_entropy(model(x), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 40 == 0) fmt::print("step {:3d}  loss {:.4f}\n", step, loss.item());
  }
  NoGradGuard no_grad;
  double accuracy = mean(eq(argmax(model(x), 1), labels).to(DType::f32)).item();
  fmt::print("training accuracy {:.1f}%\n", 100 * accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
