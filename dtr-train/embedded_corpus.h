// The default training text (data/corpus.txt, see data/README.md), compiled into
// the program so that `dtr-train` with no --data needs no file at run time.
#pragma once

#include <string_view>

namespace dtr::train {

std::string_view embedded_corpus();

}  // namespace dtr::train
