# Third-party dependencies: Debian packages (scripts/install-deps.sh) or the offline
# prefix in .deps/ (scripts/offline-deps.sh).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)

# PCRE2 (8-bit, with JIT) and utf8proc: static libraries when present so binaries built
# from the offline prefix run without it.
find_path(QWENRT_PCRE2_INCLUDE pcre2.h)
find_library(QWENRT_PCRE2_LIBRARY NAMES libpcre2-8.a pcre2-8)
find_path(QWENRT_UTF8PROC_INCLUDE utf8proc.h)
find_library(QWENRT_UTF8PROC_LIBRARY NAMES libutf8proc.a utf8proc)
if(NOT QWENRT_PCRE2_INCLUDE OR NOT QWENRT_PCRE2_LIBRARY)
  message(FATAL_ERROR "PCRE2 not found: run scripts/install-deps.sh (libpcre2-dev) or scripts/offline-deps.sh")
endif()
if(NOT QWENRT_UTF8PROC_INCLUDE OR NOT QWENRT_UTF8PROC_LIBRARY)
  message(FATAL_ERROR "utf8proc not found: run scripts/install-deps.sh (libutf8proc-dev) or scripts/offline-deps.sh")
endif()
add_library(qwenrt::pcre2 INTERFACE IMPORTED)
target_include_directories(qwenrt::pcre2 INTERFACE ${QWENRT_PCRE2_INCLUDE})
target_link_libraries(qwenrt::pcre2 INTERFACE ${QWENRT_PCRE2_LIBRARY})
target_compile_definitions(qwenrt::pcre2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8 PCRE2_STATIC)
add_library(qwenrt::utf8proc INTERFACE IMPORTED)
target_include_directories(qwenrt::utf8proc INTERFACE ${QWENRT_UTF8PROC_INCLUDE})
target_link_libraries(qwenrt::utf8proc INTERFACE ${QWENRT_UTF8PROC_LIBRARY})
target_compile_definitions(qwenrt::utf8proc INTERFACE UTF8PROC_STATIC)
