// Collective agreement for checkpoints, over the world group: every rank learns
// every rank's string, and a failure on any rank becomes the same error on every
// rank (so no rank is left waiting in a later collective, and no rank acts on a
// checkpoint another rank found broken).
#pragma once

#include <string>
#include <vector>

namespace dtr::checkpoint {

// Collective: every rank's string, in rank order.
std::vector<std::string> all_gather_strings(const std::string& mine);

// Collective: `my_error` is "" when this rank succeeded. When any rank failed,
// every rank throws one Error "<what> failed: rank r: <error>; ..." listing each
// failing rank's message.
void agree_or_throw(const std::string& what, const std::string& my_error);

}  // namespace dtr::checkpoint
