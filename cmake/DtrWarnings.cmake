# Warnings for dtr's own code: -Wall -Wextra, errors when DTR_WERROR is on (CI turns it on).
# -Wno-missing-field-initializers: dtr's own code (tests above all) fills structs partially. The public
# option structs give every member an initializer, so a user's -Wextra build of `{.lr = 3e-3}` is clean
# (the install_option_structs test, tests/install/option_structs.cpp).
add_library(dtr_warnings INTERFACE)
target_compile_options(dtr_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DTR_WERROR}>>:-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DTR_WERROR}>>:-Werror=all-warnings>)
