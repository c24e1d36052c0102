# Writes build_info_values.cc (cmake -P, from common/build_info/CMakeLists.txt at configure time
# and at every build): the values passed as KVTIER_BI_* plus the revision, which is
# KVTIER_BI_REVISION when given, else `git rev-parse --short HEAD` of the source tree with -dirty
# when tracked files differ from it, else "unknown" (no git, or a tree that is not a checkout of
# its own: a tarball, a container build without .git). configure_file leaves an unchanged file
# alone, so nothing recompiles when the revision is the same.
set(revision "${KVTIER_BI_REVISION}")
if(revision STREQUAL "" AND KVTIER_BI_GIT)
  execute_process(COMMAND "${KVTIER_BI_GIT}" -C "${KVTIER_BI_SOURCE_DIR}" rev-parse --show-toplevel
                  RESULT_VARIABLE rc OUTPUT_VARIABLE toplevel ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0)
    file(REAL_PATH "${toplevel}" toplevel)
    file(REAL_PATH "${KVTIER_BI_SOURCE_DIR}" source_dir)
  endif()
  # A tree extracted inside another repository is not that repository's revision.
  if(rc EQUAL 0 AND toplevel STREQUAL source_dir)
    execute_process(COMMAND "${KVTIER_BI_GIT}" -C "${KVTIER_BI_SOURCE_DIR}" rev-parse --short HEAD
                    RESULT_VARIABLE rc OUTPUT_VARIABLE head ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND NOT head STREQUAL "")
      set(revision "${head}")
      # --no-optional-locks: never take the index lock a git command running beside the build needs.
      execute_process(COMMAND "${KVTIER_BI_GIT}" --no-optional-locks -C "${KVTIER_BI_SOURCE_DIR}"
                              status --porcelain --untracked-files=no
                      RESULT_VARIABLE rc OUTPUT_VARIABLE changes ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT rc EQUAL 0 OR NOT changes STREQUAL "")
        string(APPEND revision "-dirty")
      endif()
    endif()
  endif()
endif()
if(revision STREQUAL "")
  set(revision "unknown")
endif()

# C string literals: backslashes and quotes escaped (the values come from the command line).
foreach(name revision KVTIER_BI_VERSION KVTIER_BI_CUDA_ARCHS KVTIER_BI_CUDA_VERSION
             KVTIER_BI_LIBURING_VERSION KVTIER_BI_OPENSSL_VERSION KVTIER_BI_BUILD_TYPE
             KVTIER_BI_COMPILER)
  string(REPLACE "\\" "\\\\" value "${${name}}")
  string(REPLACE "\"" "\\\"" value "${value}")
  string(REGEX REPLACE "[\r\n]" " " value "${value}")
  set(${name}_C "${value}")
endforeach()
configure_file("${KVTIER_BI_TEMPLATE}" "${KVTIER_BI_OUT}" @ONLY)
