# Warnings are errors on project code (never on third-party headers, which are included
# as system headers by their imported targets).
function(qwenrt_warnings target)
  set(cxx_flags -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)
  if(QWENRT_WERROR)
    list(APPEND cxx_flags -Werror)
  endif()
  # GCC 12 reports impossible overlaps inside std::string's inlined memcpy at -O3
  # (a known false positive of -Wrestrict); keep it a warning there.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND cxx_flags -Wno-error=restrict)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>)
  if(QWENRT_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  endif()
  set(hip_flags -Wall -Wextra -Wshadow)
  if(QWENRT_WERROR)
    list(APPEND hip_flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:HIP>:${hip_flags}>)
endfunction()
