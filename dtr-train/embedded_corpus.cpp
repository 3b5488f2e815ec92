// The bytes of data/corpus.txt, included by the assembler (.incbin): no generated
// source, no size limit of string literals. DTR_CORPUS_PATH comes from CMake.
#include "embedded_corpus.h"

#ifndef DTR_CORPUS_PATH
#error "DTR_CORPUS_PATH must name data/corpus.txt"
#endif

__asm__(".pushsection .rodata\n"
        ".balign 16\n"
        ".global dtr_train_corpus_begin\n"
        ".hidden dtr_train_corpus_begin\n"
        "dtr_train_corpus_begin:\n"
        ".incbin \"" DTR_CORPUS_PATH "\"\n"
        ".global dtr_train_corpus_end\n"
        ".hidden dtr_train_corpus_end\n"
        "dtr_train_corpus_end:\n"
        ".popsection\n");

extern "C" const char dtr_train_corpus_begin[];
extern "C" const char dtr_train_corpus_end[];

namespace dtr::train {

std::string_view embedded_corpus() {
  return {dtr_train_corpus_begin, static_cast<size_t>(dtr_train_corpus_end - dtr_train_corpus_begin)};
}

}  // namespace dtr::train
