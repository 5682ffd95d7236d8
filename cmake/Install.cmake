# Install rules: `cmake --install build/release --prefix /opt/kjit` puts
#   bin/kjit                                the CLI (when built)
#   lib/libkjit_*.a, lib/libkjit_c.so        the libraries (static C++, shared C API)
#   include/kjit/kjit.h, include/kjit/kjit_c.h   the umbrella headers, and the
#   include/kjit/<folder>/*.h               headers they include
#   lib/cmake/kjit/kjitConfig.cmake         find_package(kjit): kjit::kjit, kjit::kjit_c
#   lib/pkgconfig/kjit.pc, kjit_c.pc         for pkg-config users
#   lib/kjit/python/kjit/                   the Python package (PYTHONPATH), over libkjit_c
#   share/doc/kjit/LICENSE, README.md
include(CMakePackageConfigHelpers)

set(KJIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kjit)
set(KJIT_PYTHON_DIR ${CMAKE_INSTALL_LIBDIR}/kjit/python CACHE STRING
    "Where `cmake --install` puts the Python package (relative to the prefix)")

# The libraries, and the INTERFACE targets their link lines name.
set(kjit_library_targets kjit kjit_runtime kjit_tuner kjit_build kjit_cache kjit_compiler
                         kjit_cuda kjit_templates kjit_support kjit_nvrtc kjit_sqlite
                         kjit_crypto kjit_warnings)
install(TARGETS ${kjit_library_targets} EXPORT kjitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kjit_c EXPORT kjitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET kjit_cli_main)
  install(TARGETS kjit_cli_main RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Headers: the two umbrella headers, then every header of the library folders
# (the public ones include the rest), keeping the folder layout under kjit/.
install(FILES ${PROJECT_SOURCE_DIR}/include/kjit/kjit.h ${PROJECT_SOURCE_DIR}/include/kjit/kjit_c.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kjit)
foreach(folder support compiler runtime cache tuner templates)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kjit
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(EXPORT kjitTargets NAMESPACE kjit:: DESTINATION ${KJIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kjitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kjitConfig.cmake
                              INSTALL_DESTINATION ${KJIT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kjitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kjitConfig.cmake ${PROJECT_BINARY_DIR}/kjitConfigVersion.cmake
        DESTINATION ${KJIT_CMAKE_DIR})

# pkg-config: kjit (the C++ libraries, in link order) and kjit_c (the C API).
set(KJIT_PC_NVRTC ${KJIT_NVRTC_LIBRARY})
configure_file(${PROJECT_SOURCE_DIR}/cmake/kjit.pc.in ${PROJECT_BINARY_DIR}/kjit.pc @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kjit_c.pc.in ${PROJECT_BINARY_DIR}/kjit_c.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kjit.pc ${PROJECT_BINARY_DIR}/kjit_c.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python package, next to nothing else: it finds libkjit_c three folders up.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/kjit DESTINATION ${KJIT_PYTHON_DIR}
        PATTERN "__pycache__" EXCLUDE)

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
