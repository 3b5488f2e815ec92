// Collective agreement for checkpoints, over the world group: every rank learns
// every rank's string, and a failure on any rank becomes the same error on every
// rank (so no rank is left waiting in a later collective, and no rank acts on a
// checkpoint another rank found broken).
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace dtr::checkpoint {

// Collective: every rank's string, in rank order.
std::vector<std::string> all_gather_strings(const std::string& mine);

// Collective: `my_error` is "" when this rank succeeded. When any rank failed,
// every rank throws one Error "<what> failed: rank r: <error>; ..." listing each
// failing rank's message.
void agree_or_throw(const std::string& what, const std::string& my_error);

// The steps of a save that one rank writes while every rank gathers: run(step)
// runs a step on the writing rank only, and not after a step failed there, so
// the ranks still meet in every collective between the steps; error() is then
// the first failure ("" when none), for agree_or_throw.
class WriterSteps {
 public:
  explicit WriterSteps(bool writer) : writer_(writer) {}
  template <class Step>
  void run(Step&& step) {
    if (!writer_ || !error_.empty()) return;
    try {
      step();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  const std::string& error() const { return error_; }

 private:
  bool writer_;
  std::string error_;
};

}  // namespace dtr::checkpoint
