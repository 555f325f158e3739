#[=======================================================================[.rst:
CompileIQApply
--------------

What applies a toolchain file's tuned flags to the tuned targets and groups.
``CompileIQ.cmake`` includes it, and every toolchain file that ``compileiq_build``
writes holds a copy of it: where the Python package is not installed (a teammate,
a CI runner, a Docker image), the toolchain file defines ``compileiq_tune()`` and
``compileiq_add_benchmark()`` from ``_compileiq_standalone_tune()`` and gives the
same targets and groups the same flags, with CMake and the compilers alone.

No ``include_guard()``: in a toolchain file it would end that file here.
#]=======================================================================]

# The name of a group of <sources> that GROUP does not name: the first file's name without
# extension and wildcards, else its folder's name (gamma/*.cu gives gamma, fattn-vec*.cu fattn-vec).
function(_compileiq_group_name sources out)
  list(GET sources 0 first)
  string(REGEX REPLACE "\\.[^/.]*$" "" group "${first}")
  string(REGEX REPLACE "[*?]" "" group "${group}")
  string(REGEX REPLACE "/+$" "" group "${group}")
  string(REGEX REPLACE ".*/" "" group "${group}")
  set(${out} "${group}" PARENT_SCOPE)
endfunction()

# The target <name> stands for (an ALIAS resolved), in <out>; a name that is no target is an error.
function(_compileiq_real_target name out)
  if(NOT TARGET "${name}")
    message(FATAL_ERROR
      "compileiq_tune(): '${name}' is not a target. Call compileiq_tune() "
      "after the add_library() or add_executable() that defines it, and check the spelling.")
  endif()
  get_target_property(aliased "${name}" ALIASED_TARGET)
  if(aliased)
    set(name "${aliased}")
  endif()
  set(${out} "${name}" PARENT_SCOPE)
endfunction()

# Record that <tgt> is tuned in <languages>: whole (<group> "") or group <group> of <sources>
# (its files, and the call that named them).
function(_compileiq_mark tgt group languages sources)
  set(prop COMPILEIQ_LANGUAGES)
  if(NOT group STREQUAL "")
    set(prop "COMPILEIQ_GROUP_${group}_LANGUAGES")
    set_property(TARGET "${tgt}" APPEND PROPERTY COMPILEIQ_GROUPS "${group}")
    set_property(TARGET "${tgt}" APPEND PROPERTY "COMPILEIQ_GROUP_${group}_SOURCES" "${sources}")
    set_property(TARGET "${tgt}" APPEND PROPERTY "COMPILEIQ_GROUP_${group}_CALLS" "${CMAKE_CURRENT_LIST_FILE}")
  endif()
  get_target_property(old "${tgt}" ${prop})
  if(NOT old)
    set(old "")
  endif()
  set(merged ${old} ${languages})
  list(REMOVE_DUPLICATES merged)
  set_property(TARGET "${tgt}" PROPERTY ${prop} "${merged}")
  set_property(GLOBAL APPEND PROPERTY _COMPILEIQ_TUNED "${tgt}")
endfunction()

# The architecture keys the toolchain file has flags for, for one target and language.
function(_compileiq_tuned_keys id lang out)
  get_cmake_property(variables VARIABLES)
  set(keys "")
  foreach(v IN LISTS variables)
    if(v MATCHES "^COMPILEIQ_FLAGS_${id}_${lang}_(.+)$")
      list(APPEND keys "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out} "${keys}" PARENT_SCOPE)
endfunction()

# The CUDA architecture key of a target: sm_<NN> when it builds for exactly
# one architecture, "portable" otherwise.
function(_compileiq_cuda_arch_key tgt out_key out_archs)
  get_target_property(archs "${tgt}" CUDA_ARCHITECTURES)
  if(NOT archs OR archs STREQUAL "archs-NOTFOUND")
    set(archs "${CMAKE_CUDA_ARCHITECTURES}")
  endif()
  if(NOT archs)
    # Policy CMP0104 OLD: the architecture may come as -arch=sm_NN in CMAKE_CUDA_FLAGS.
    string(REGEX MATCHALL "(-arch|--gpu-architecture)[= ]sm_[0-9]+[a-z]?|code=\\[?sm_[0-9]+[a-z]?" found
           "${CMAKE_CUDA_FLAGS}")
    foreach(f IN LISTS found)
      string(REGEX REPLACE ".*sm_" "" f "${f}")
      list(APPEND archs "${f}")
    endforeach()
    list(REMOVE_DUPLICATES archs)
  endif()
  if("native" IN_LIST archs)
    # CMake resolved "native" at configure time; without a GPU it silently records an error
    # text, and nvcc then builds for its default architecture instead.
    if(NOT CMAKE_CUDA_ARCHITECTURES_NATIVE MATCHES "^[0-9]" AND NOT COMPILEIQ_TUNING_ARCH)
      message(FATAL_ERROR
        "CompileIQ: ${tgt} builds for CUDA_ARCHITECTURES native, but CMake found no GPU here "
        "(${CMAKE_CUDA_ARCHITECTURES_NATIVE}). Configure on the machine with the GPU, or name its "
        "architecture: -DCMAKE_CUDA_ARCHITECTURES=90 (for an H100/H200), or set CUDA_ARCHITECTURES "
        "on ${tgt}.")
    endif()
    list(REMOVE_ITEM archs native)
    list(APPEND archs ${CMAKE_CUDA_ARCHITECTURES_NATIVE})
  endif()
  set(numbers "")
  foreach(a IN LISTS archs)
    string(REGEX REPLACE "-(real|virtual)$" "" n "${a}")
    list(APPEND numbers "${n}")
  endforeach()
  list(REMOVE_DUPLICATES numbers)
  list(LENGTH numbers count)
  if(count EQUAL 1 AND numbers MATCHES "^[0-9]+[a-z]?$")
    set(${out_key} "sm_${numbers}" PARENT_SCOPE)
  else()
    set(${out_key} "portable" PARENT_SCOPE)
  endif()
  set(${out_archs} "${archs}" PARENT_SCOPE)
endfunction()

function(_compileiq_host_key out_key)
  string(TOLOWER "${CMAKE_HOST_SYSTEM_PROCESSOR}" p)
  if(p STREQUAL "amd64")
    set(p "x86_64")
  elseif(p STREQUAL "arm64")
    set(p "aarch64")
  endif()
  string(MAKE_C_IDENTIFIER "${p}" p)
  set(${out_key} "${p}" PARENT_SCOPE)
endfunction()

# CMAKE_<LANG>_COMPILER_ID and _VERSION are variables of the directory that enabled <LANG>,
# which may be below the one where this module's end-of-configure code runs (ggml enables
# CUDA in src/ggml-cuda): where they are not set here, read them in the directory of the first
# of <units> (tuned targets, or <target>:<group>) whose directory has them.
function(_compileiq_compiler lang units out_id out_version)
  set(id "${CMAKE_${lang}_COMPILER_ID}")
  set(version "${CMAKE_${lang}_COMPILER_VERSION}")
  foreach(unit IN LISTS units)
    if(NOT id STREQUAL "")
      break()
    endif()
    string(REGEX REPLACE ":.*" "" tgt "${unit}")
    get_target_property(dir "${tgt}" SOURCE_DIR)
    get_directory_property(id DIRECTORY "${dir}" DEFINITION CMAKE_${lang}_COMPILER_ID)
    get_directory_property(version DIRECTORY "${dir}" DEFINITION CMAKE_${lang}_COMPILER_VERSION)
  endforeach()
  set(${out_id} "${id}" PARENT_SCOPE)
  set(${out_version} "${version}" PARENT_SCOPE)
endfunction()

# Tuned flags come from a compiler of some version; with another one, keep
# only the flags this compiler accepts, and say so, rather than break the build.
# <name> is the tuned unit (<tgt> or <tgt>:<group>).
function(_compileiq_check_compiler name tgt lang flags_var)
  _compileiq_compiler(${lang} "${tgt}" id version)
  set(now "${id} ${version}")
  # Blank: written by a version of this module that did not find the compiler (see above).
  if(NOT DEFINED COMPILEIQ_TUNED_WITH_${lang} OR COMPILEIQ_TUNED_WITH_${lang} STREQUAL now
     OR COMPILEIQ_TUNED_WITH_${lang} MATCHES "^ *$")
    return()
  endif()
  message(WARNING
    "CompileIQ: the ${lang} flags of ${name} were tuned with ${COMPILEIQ_TUNED_WITH_${lang}}; "
    "this build uses ${now}. Flags this compiler rejects are dropped; re-run "
    "`python -m compileiq_build tune` with this compiler for flags tuned to it.")
  include(CheckCompilerFlag)
  set(CMAKE_REQUIRED_QUIET ON)
  set(kept "")
  foreach(flag IN LISTS ${flags_var})
    string(MAKE_C_IDENTIFIER "COMPILEIQ_ACCEPTS_${lang}_${flag}" ok)
    check_compiler_flag(${lang} "${flag}" ${ok})
    if(${ok})
      list(APPEND kept "${flag}")
    else()
      message(WARNING "CompileIQ: ${now} rejects ${flag}; it is not applied to ${name}.")
    endif()
  endforeach()
  set(${flags_var} "${kept}" PARENT_SCOPE)
endfunction()

# With separable compilation (-rdc, and -dlto above all) ptxas also runs at the device
# link, which happens in the executables and libraries that link <tgt>: the options
# reach that step too, through the link interface.
function(_compileiq_device_link_options tgt)
  get_target_property(rdc "${tgt}" CUDA_SEPARABLE_COMPILATION)
  if(NOT rdc)
    return()
  endif()
  set(opts "")
  foreach(f IN LISTS ARGN)
    list(APPEND opts "$<DEVICE_LINK:${f}>")
  endforeach()
  set_property(TARGET "${tgt}" APPEND PROPERTY INTERFACE_LINK_OPTIONS ${opts})
  set_property(TARGET "${tgt}" APPEND PROPERTY LINK_OPTIONS ${opts})
endfunction()

# Flags go through generator expressions, so ',' and '>' inside a flag are escaped.
# With <sources> (a group's files, of <lang>) the flags go on those files alone.
function(_compileiq_add_flags tgt lang flags sources)
  if(sources)
    set_property(SOURCE ${sources} TARGET_DIRECTORY "${tgt}" APPEND PROPERTY COMPILE_OPTIONS ${flags})
    return()
  endif()
  set(opts "")
  set(escaped "")
  foreach(f IN LISTS flags)
    string(REPLACE ">" "$<ANGLE-R>" f "${f}")
    string(REPLACE "," "$<COMMA>" f "${f}")
    list(APPEND opts "$<$<COMPILE_LANGUAGE:${lang}>:${f}>")
    list(APPEND escaped "${f}")
  endforeach()
  set_property(TARGET "${tgt}" APPEND PROPERTY COMPILE_OPTIONS ${opts})
  if(lang STREQUAL "CUDA")
    _compileiq_device_link_options("${tgt}" ${escaped})
  endif()
endfunction()

# Every source of <tgt> as an absolute path (generator expressions left out).  Relative
# paths are the target's: this runs in the top-level directory, where CMake would resolve
# them against the wrong folder.
function(_compileiq_target_sources tgt out)
  get_target_property(sources "${tgt}" SOURCES)
  get_target_property(tdir "${tgt}" SOURCE_DIR)
  set(found "")
  foreach(src IN LISTS sources)
    if(NOT src MATCHES "\\$<")
      get_filename_component(src "${src}" ABSOLUTE BASE_DIR "${tdir}")
      list(APPEND found "${src}")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The <sources> of <tgt> that compile as <lang> (by LANGUAGE, else extension).
function(_compileiq_sources_of_language tgt lang sources out)
  set(found "")
  foreach(src IN LISTS sources)
    get_source_file_property(src_lang "${src}" TARGET_DIRECTORY "${tgt}" LANGUAGE)
    if(NOT src_lang)
      get_filename_component(ext "${src}" LAST_EXT)
      string(SUBSTRING "${ext}" 1 -1 ext)
      if(ext IN_LIST CMAKE_${lang}_SOURCE_FILE_EXTENSIONS)
        set(src_lang "${lang}")
      endif()
    endif()
    if(src_lang STREQUAL lang)
      list(APPEND found "${src}")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The files of group <group> of <tgt>: its SOURCES patterns (relative to the target's folder;
# '*' and '?' match within one path component), each of which must name sources of the target.
function(_compileiq_group_sources tgt group out)
  get_target_property(patterns "${tgt}" "COMPILEIQ_GROUP_${group}_SOURCES")
  get_target_property(calls "${tgt}" "COMPILEIQ_GROUP_${group}_CALLS")
  list(GET calls 0 call)
  get_target_property(tdir "${tgt}" SOURCE_DIR)
  _compileiq_target_sources("${tgt}" all)
  set(examples "")
  foreach(src IN LISTS all)
    list(LENGTH examples n)
    if(n LESS 5)
      file(RELATIVE_PATH rel "${tdir}" "${src}")
      list(APPEND examples "${rel}")
    endif()
  endforeach()
  list(LENGTH all count)
  list(JOIN examples ", " examples)
  set(where "compileiq_tune(${tgt} ... GROUP ${group}) in ${call}")
  set(hint "SOURCES are paths relative to the folder of ${tgt} (${tdir}) of its own sources; it has ${count}, such as ${examples}.")
  set(found "")
  foreach(pattern IN LISTS patterns)
    get_filename_component(abs "${pattern}" ABSOLUTE BASE_DIR "${tdir}")
    if(pattern MATCHES "[*?]")
      # The path as a regular expression: its special characters escaped, then the wildcards.
      string(REGEX REPLACE "([.+^$()|\\])" "\\\\\\1" re "${abs}")
      string(REPLACE "[" "\\[" re "${re}")
      string(REPLACE "]" "\\]" re "${re}")
      string(REPLACE "*" "[^/]*" re "${re}")
      string(REPLACE "?" "[^/]" re "${re}")
      set(matched "")
      foreach(src IN LISTS all)
        if(src MATCHES "^${re}$")
          list(APPEND matched "${src}")
        endif()
      endforeach()
      if(NOT matched)
        message(FATAL_ERROR "${where}: '${pattern}' matches no source of ${tgt}. ${hint}")
      endif()
    elseif(abs IN_LIST all)
      set(matched "${abs}")
    else()
      message(FATAL_ERROR "${where}: ${abs} is not a source of ${tgt}. ${hint}")
    endif()
    list(APPEND found ${matched})
  endforeach()
  list(REMOVE_DUPLICATES found)
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The files of tuned unit <tgt> (whole: <sources> empty; a group: its files) that compile as
# one of <langs>, as paths relative to the top-level source folder, sorted: what the toolchain
# file's digest of the unit's sources covers.  Headers are not covered; generated files and
# files outside the source folder are left out (their paths differ between machines).
function(_compileiq_unit_files tgt sources langs out)
  if(NOT sources)
    _compileiq_target_sources("${tgt}" sources)
  endif()
  set(files "")
  foreach(lang IN LISTS langs)
    _compileiq_sources_of_language("${tgt}" "${lang}" "${sources}" plain)
    foreach(src IN LISTS plain)
      get_source_file_property(generated "${src}" TARGET_DIRECTORY "${tgt}" GENERATED)
      cmake_path(IS_PREFIX CMAKE_SOURCE_DIR "${src}" NORMALIZE in_source)
      cmake_path(IS_PREFIX CMAKE_BINARY_DIR "${src}" NORMALIZE in_build)
      if(in_source AND NOT in_build AND NOT generated)
        file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${src}")
        list(APPEND files "${rel}")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES files)
  list(SORT files)
  set(${out} "${files}" PARENT_SCOPE)
endfunction()

# Where the toolchain file records the digest of tuned unit <name>'s sources as tuned
# (COMPILEIQ_SOURCES_<id>; older files do not): notes the unit when its <files> differ now, for
# _compileiq_toolchain_names to say.  The digest is compileiq_build's toolchain.source_digest:
# sha256 of one line "<path> <sha256 of the file>" per file.
function(_compileiq_check_sources name id files)
  if(NOT DEFINED COMPILEIQ_SOURCES_${id})
    return()
  endif()
  set(text "")
  foreach(rel IN LISTS files)
    set(hash "missing")
    if(EXISTS "${CMAKE_SOURCE_DIR}/${rel}")
      file(SHA256 "${CMAKE_SOURCE_DIR}/${rel}" hash)
    endif()
    string(APPEND text "${rel} ${hash}\n")
  endforeach()
  string(SHA256 digest "${text}")
  if(NOT digest STREQUAL COMPILEIQ_SOURCES_${id})
    set_property(GLOBAL APPEND PROPERTY _COMPILEIQ_SOURCES_CHANGED "${name}")
  endif()
endfunction()

# Outside the driver's trees: the toolchain file's flags for tuned unit <name> (<tgt> whole, or
# the group's files <plain> of <lang>) applied, and <out_applied> set to them.  A unit the file
# has no flags for here (only for other architectures, or not at all: tuned or renamed since
# the file was written) is noted; _compileiq_toolchain_names says so once.
function(_compileiq_apply_tuned name tgt lang id key plain cuda_archs out_applied)
  set(applied "")
  set(var "COMPILEIQ_FLAGS_${id}_${lang}_${key}")
  if(NOT DEFINED ${var})
    set(var "COMPILEIQ_FLAGS_${id}_${lang}_portable")
  endif()
  if(DEFINED ${var})
    set(applied "${${var}}")
    _compileiq_check_compiler("${name}" "${tgt}" "${lang}" applied)
    _compileiq_add_flags("${tgt}" "${lang}" "${applied}" "${plain}")
    list(JOIN applied " " shown)
    message(STATUS "CompileIQ: ${name} (${lang}, ${key}) uses tuned flags: ${shown}")
  else()
    _compileiq_tuned_keys("${id}" "${lang}" tuned_for)
    if(tuned_for)
      set(builds_for "${key}")
      if(key STREQUAL "portable")
        list(JOIN cuda_archs ", " builds_for)
        set(builds_for "several architectures (${builds_for})")
      endif()
      list(JOIN tuned_for ", " tuned_for)
      string(CONCAT why
        "${name} (${lang}) builds for ${builds_for}, but the toolchain file has flags for it only "
        "for ${tuned_for}: build ${tgt} for one of those, or tune on each architecture it builds "
        "for and merge the stores (python -m compileiq_build emit --merge STORE...)")
      set_property(GLOBAL APPEND PROPERTY _COMPILEIQ_UNFLAGGED "${why}")
    elseif(DEFINED COMPILEIQ_TOOLCHAIN_UNITS AND NOT name IN_LIST COMPILEIQ_TOOLCHAIN_UNITS)
      string(CONCAT why "${name} (${lang}) is not in the toolchain file: not tuned yet (tune "
             "--targets left it out), or marked for tuning or renamed since the file was written")
      set_property(GLOBAL APPEND PROPERTY _COMPILEIQ_UNFLAGGED "${why}")
    endif()
  endif()
  set(${out_applied} "${applied}" PARENT_SCOPE)
endfunction()

# Once the tuned units have their flags (<units>: the names of those this project tunes): one
# warning for the units the toolchain file has no flags for here, and one for the names the
# file tunes that this project does not (a target or group renamed or removed since).
function(_compileiq_toolchain_names units)
  get_property(changed GLOBAL PROPERTY _COMPILEIQ_SOURCES_CHANGED)
  foreach(name IN LISTS changed)
    message(WARNING
      "CompileIQ: the sources of ${name} have changed since its flags were tuned (headers are "
      "not compared); the flags still apply, but may no longer win. Run "
      "`python -m compileiq_build check BUILD_DIR` to measure them again, or tune again.")
  endforeach()
  get_property(unflagged GLOBAL PROPERTY _COMPILEIQ_UNFLAGGED)
  if(unflagged)
    list(JOIN unflagged ";\n  " text)
    message(WARNING
      "CompileIQ: these tuned targets keep the project's flags, as the toolchain file has none "
      "for them here:\n  ${text}.\nFor a target not tuned yet, new or renamed: python -m "
      "compileiq_build tune <build folder>, then commit the toolchain file it writes.")
  endif()
  set(gone "")
  foreach(name IN LISTS COMPILEIQ_TOOLCHAIN_UNITS)
    if(NOT name IN_LIST units)
      list(APPEND gone "${name}")
    endif()
  endforeach()
  if(gone)
    list(JOIN gone ", " gone)
    list(JOIN units ", " tuned)
    if(NOT tuned)
      set(tuned "none")
    endif()
    message(WARNING
      "CompileIQ: the toolchain file tunes ${gone}, which this project does not mark with "
      "compileiq_tune() (renamed or removed since it was tuned?): those flags reach nothing. "
      "Tuned here: ${tuned}. Tune the current names (python -m compileiq_build tune <build "
      "folder>) and commit the toolchain file it writes.")
  endif()
endfunction()

# --- where the compileiq_build package is absent --------------------------------------------
# The toolchain file's compileiq_tune(): the targets and groups recorded as CompileIQ.cmake
# records them, without its checks (the project passed them where it was tuned); at the end of
# the top-level directory they get the file's flags.
function(_compileiq_standalone_tune)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "GROUP" "LANGUAGES;SOURCES")
  set(group "")
  if(arg_SOURCES)
    set(group "${arg_GROUP}")
    if(NOT DEFINED arg_GROUP)
      _compileiq_group_name("${arg_SOURCES}" group)
    endif()
  endif()
  set(languages ${arg_LANGUAGES})
  if(NOT languages)
    set(languages CUDA)
  endif()
  foreach(tgt IN LISTS arg_UNPARSED_ARGUMENTS)
    _compileiq_real_target("${tgt}" tgt)
    _compileiq_mark("${tgt}" "${group}" "${languages}" "${arg_SOURCES}")
  endforeach()
  get_property(deferred GLOBAL PROPERTY _COMPILEIQ_STANDALONE_DEFERRED)
  if(NOT deferred)
    set_property(GLOBAL PROPERTY _COMPILEIQ_STANDALONE_DEFERRED TRUE)
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _compileiq_standalone_finalize)
  endif()
endfunction()

# Runs at the end of the top-level directory: every recorded unit gets its flags, as
# CompileIQ.cmake's _compileiq_unit gives them.
function(_compileiq_standalone_finalize)
  message(STATUS "CompileIQ: the compileiq_build package is not found here; the toolchain file "
          "applies its flags itself")
  get_property(tuned GLOBAL PROPERTY _COMPILEIQ_TUNED)
  list(REMOVE_DUPLICATES tuned)
  _compileiq_host_key(host_key)
  set(names "")
  foreach(tgt IN LISTS tuned)
    get_target_property(whole "${tgt}" COMPILEIQ_LANGUAGES)
    get_target_property(groups "${tgt}" COMPILEIQ_GROUPS)
    set(units "")
    set(langs "")
    if(whole)
      set(units "-")  # the whole target: a name no group can have
      set(langs ${whole})
    endif()
    if(groups)
      list(REMOVE_DUPLICATES groups)
      list(APPEND units ${groups})
      foreach(g IN LISTS groups)
        get_target_property(glangs "${tgt}" "COMPILEIQ_GROUP_${g}_LANGUAGES")
        list(APPEND langs ${glangs})
      endforeach()
    endif()
    set(cuda_key "")
    set(cuda_archs "")
    if("CUDA" IN_LIST langs)
      _compileiq_cuda_arch_key("${tgt}" cuda_key cuda_archs)
    endif()
    foreach(unit IN LISTS units)
      set(name "${tgt}")
      set(sources "")
      set(ulangs "${whole}")
      if(NOT unit STREQUAL "-")
        set(name "${tgt}:${unit}")
        get_target_property(ulangs "${tgt}" "COMPILEIQ_GROUP_${unit}_LANGUAGES")
        _compileiq_group_sources("${tgt}" "${unit}" sources)
      endif()
      string(MAKE_C_IDENTIFIER "${name}" id)
      list(APPEND names "${name}")
      _compileiq_unit_files("${tgt}" "${sources}" "${ulangs}" files)
      _compileiq_check_sources("${name}" "${id}" "${files}")
      foreach(lang IN LISTS ulangs)
        set(plain "")
        if(sources)
          _compileiq_sources_of_language("${tgt}" "${lang}" "${sources}" plain)
          if(NOT plain)
            continue()  # a group's flags reach its own files only
          endif()
        endif()
        set(key "${host_key}")
        if(lang STREQUAL "CUDA")
          set(key "${cuda_key}")
        endif()
        _compileiq_apply_tuned("${name}" "${tgt}" "${lang}" "${id}" "${key}" "${plain}" "${cuda_archs}" applied)
      endforeach()
    endforeach()
  endforeach()
  _compileiq_toolchain_names("${names}")
endfunction()
