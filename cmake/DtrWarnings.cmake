# Warnings for dtr's own code: -Wall -Wextra, errors when DTR_WERROR is on (CI turns it on).
# -Wno-missing-field-initializers: options structs are meant to be filled partially with designated initializers.
add_library(dtr_warnings INTERFACE)
target_compile_options(dtr_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DTR_WERROR}>>:-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DTR_WERROR}>>:-Werror=all-warnings>)
