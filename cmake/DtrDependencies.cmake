# Third-party dependencies, all from Debian packages (scripts/setup.sh installs them).
# dtr_config carries the include path, dependencies and definitions every dtr target needs.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(spdlog REQUIRED)
find_package(Threads REQUIRED)
find_path(RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED)

# dtr_config_base has no compile feature, so CUDA sources can use it: CMake 3.25
# cannot express a C++20 requirement for nvcc (DtrCuda.cmake passes -std=c++20).
add_library(dtr_config_base INTERFACE)
target_include_directories(dtr_config_base INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:include/dtr>)
target_include_directories(dtr_config_base SYSTEM INTERFACE ${RANDOM123_INCLUDE_DIR})
target_link_libraries(dtr_config_base INTERFACE Eigen3::Eigen spdlog::spdlog Threads::Threads)
target_compile_definitions(dtr_config_base INTERFACE $<$<BOOL:${DTR_WITH_CUDA}>:DTR_WITH_CUDA=1>)
if(DTR_WITH_CUDA)
  target_link_libraries(dtr_config_base INTERFACE CUDA::cudart)
endif()

add_library(dtr_config INTERFACE)
target_link_libraries(dtr_config INTERFACE dtr_config_base)
target_compile_features(dtr_config INTERFACE cxx_std_20)
