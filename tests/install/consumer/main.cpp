// Uses the installed dtr: builds a tensor and checks a value computed by hand.
#include "dtensor/factory.h"

#include <cstdio>

int main() {
  dtr::Tensor t = dtr::arange(6).view({2, 3}).t().contiguous();  // [[0,3],[1,4],[2,5]]
  std::vector<float> v = t.to_vector<float>();
  bool ok = v == std::vector<float>{0, 3, 1, 4, 2, 5};
  std::printf("consumer: %s\n", ok ? "ok" : "wrong values");
  return ok ? 0 : 1;
}
