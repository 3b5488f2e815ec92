# Third-party dependencies, all from Debian packages (scripts/setup.sh installs them).
# dtr_config carries the include path, dependencies and definitions every dtr target needs.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(spdlog REQUIRED)
find_package(Threads REQUIRED)
find_path(RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED)

add_library(dtr_config INTERFACE)
target_compile_features(dtr_config INTERFACE cxx_std_20)
target_include_directories(dtr_config INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:include/dtr>)
target_include_directories(dtr_config SYSTEM INTERFACE ${RANDOM123_INCLUDE_DIR})
target_link_libraries(dtr_config INTERFACE Eigen3::Eigen spdlog::spdlog Threads::Threads)
target_compile_definitions(dtr_config INTERFACE $<$<BOOL:${DTR_WITH_CUDA}>:DTR_WITH_CUDA=1>)
if(DTR_WITH_CUDA)
  target_link_libraries(dtr_config INTERFACE CUDA::cudart)
endif()
