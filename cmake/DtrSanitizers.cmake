# DTR_SANITIZE=address;undefined builds everything with those sanitizers. Every
# finding is fatal (no recovery), so a test that meets one fails.
if(DTR_SANITIZE)
  string(REPLACE ";" "," _dtr_san "${DTR_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_dtr_san}> $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${_dtr_san})
  message(STATUS "dtr: sanitizers ${_dtr_san}")
endif()

# DTR_FUZZ: coverage instrumentation for libFuzzer in all of dtr's code; the
# fuzz binaries themselves link the fuzzer's main (tests/fuzz/).
if(DTR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DTR_FUZZ needs clang (libFuzzer), found ${CMAKE_CXX_COMPILER_ID}: configure with "
                        "CXX=clang++, as scripts/fuzz.sh does")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
