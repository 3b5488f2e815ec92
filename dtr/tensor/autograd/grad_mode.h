// Grad mode: whether ops record the autograd graph. On by default, per thread.
// NoGradGuard turns recording off for a scope (optimizer steps, FSDP's buffer
// copies, backward formulas themselves); EnableGradGuard turns it back on.
#pragma once

namespace dtr::autograd {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace dtr::autograd

namespace dtr {
using autograd::NoGradGuard;
}  // namespace dtr
