# DTR_SANITIZE=address;undefined builds everything with those sanitizers.
if(DTR_SANITIZE)
  string(REPLACE ";" "," _dtr_san "${DTR_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_dtr_san}> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${_dtr_san})
  message(STATUS "dtr: sanitizers ${_dtr_san}")
endif()
