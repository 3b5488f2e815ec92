# install(): the static library, the public headers and a CMake package so that
# another project can find_package(dtr) and link dtr::dtr.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS dtr dtr_config dtr_config_base EXPORT dtrTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Headers keep their dtr/ prefix, so <dtr/...> is the only name a consumer's
# include path gains.
install(FILES ${PROJECT_SOURCE_DIR}/dtr/dtr.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtr)
foreach(dir IN LISTS DTR_LAYERS)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/dtr/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtr
    FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT dtrTargets NAMESPACE dtr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtr)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtrConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtr)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrConfig.cmake ${PROJECT_BINARY_DIR}/dtrConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dtr)
