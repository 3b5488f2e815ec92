# ccache, when installed, wraps every C++ and CUDA compile (unless the user chose a
# launcher). Precompiled headers are cached only with pch_defines and time_macros
# sloppiness, which ccache's manual prescribes for them.
find_program(DTR_CCACHE ccache)
if(DTR_CCACHE)
  foreach(lang CXX CUDA)
    if(NOT DEFINED CMAKE_${lang}_COMPILER_LAUNCHER)
      set(CMAKE_${lang}_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros
          ${DTR_CCACHE})
    endif()
  endforeach()
  message(STATUS "dtr: compiling through ${DTR_CCACHE}")
endif()
