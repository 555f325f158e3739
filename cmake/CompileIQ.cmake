#[=======================================================================[.rst:
CompileIQ
---------

Mark CUDA and C++ targets whose compiler flags ``python -m compileiq_build``
tunes, register the benchmarks that measure them, and apply tuned flags from a
generated toolchain file.

Load it with ``find_package(CompileIQ CONFIG REQUIRED)`` (pass
``-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)``) or with
``include(CompileIQ)`` after adding that folder to ``CMAKE_MODULE_PATH``.

Commands
^^^^^^^^

.. command:: compileiq_tune

  ::

    compileiq_tune(<target>... [LANGUAGES <CUDA|CXX>...])
    compileiq_tune(<target> [LANGUAGES <CUDA|CXX>...] SOURCES <file-or-glob>... [GROUP <name>])

  Marks targets whose compile flags are tuned, for the given languages
  (``CUDA`` by default).

  With ``SOURCES``, only those sources of the target are tuned, as a group
  named ``<target>:<name>`` (``GROUP``; by default the first file's name
  without extension and wildcards, else its folder's: ``gamma/*.cu`` makes
  ``gamma``).  Paths and globs (``*``, ``?``) are relative to the
  target's own folder, where its ``add_library()`` is, and must name sources
  of the target.  Several calls on one target make several groups, each
  searched on its own, with its own flags in the toolchain file, which reach
  exactly its sources (``COMPILE_OPTIONS`` of those source files, set in the
  target's directory: a file that another target of that directory also
  compiles gets them there too).  A source belongs to one group at most, and
  a target is tuned either whole or in groups.  A candidate of a group
  rebuilds only the group's objects.  With separable compilation
  (``-dlto`` above all) the device link does not see a group's flags.

.. command:: compileiq_add_benchmark

  ::

    compileiq_add_benchmark(<name> COMMAND <executable-target-or-program> [args...]
                            [ARGS <arg>...] [TARGETS <tuned-target>...]
                            [FORMAT auto|nvbench|gbench|csv|regex|time]
                            [REGEX <regex>] [COLUMN <csv-column>]
                            [UNIT s|ms|us|ns] [HIGHER_IS_BETTER]
                            [CHECKSUM <regex>] [OUTPUT_FILE <path>] [TOLERANCE <relative>]
                            [CHECK <executable-target-or-program> [args...]]
                            [WORKDIR <dir>] [TIMEOUT <seconds>] [LABELS <label>...])

  Registers a benchmark.  ``REGEX``'s first capture group is the measured
  value: a time in ``UNIT`` or, with ``HIGHER_IS_BETTER``, a rate.  With a
  group named ``name`` (``(?<name>...)`` or ``(?P<name>...)``) every match is
  a workload of its own, named by that group, with its value in the group
  ``value`` or else the first unnamed group: one line per case of a
  benchmark that prints many, each of which a winner must not slow down.
  ``FORMAT time`` times the whole process.  Registering the same name again
  with other arguments adds a workload; winners must hold on all of them.
  Without ``TARGETS`` the benchmark exercises the tuned targets that its
  executable links, directly or not.  ``TARGETS`` may name a group,
  ``<target>:<group>``: a group is measured with the benchmarks that name it,
  or, where none does, with those of its target.  A candidate whose benchmark exits
  non-zero is invalid.  ``CHECKSUM``'s first capture group (a printed
  checksum) and the file ``OUTPUT_FILE`` (relative to ``WORKDIR``) must equal
  the baseline's exactly, or within the relative ``TOLERANCE`` for candidates
  whose flags change floating-point results.  ``CHECK`` is a command, its
  executable named as ``COMMAND``'s, that each candidate's build runs once before
  it is measured (the baseline's too): a non-zero exit makes the candidate
  invalid.

  ``ARGS`` adds arguments after ``COMMAND``'s, as written: its words are not
  checked for misspelt keywords (see below).

Misspelt keywords
^^^^^^^^^^^^^^^^^

A word of capitals, digits and ``_`` (three characters or more) that is not a
keyword of the command but one or two edits away from one (a character
inserted, deleted, replaced, or two neighbours swapped: ``FORMATT``,
``LANGUAGE``) stops the configure at the call, naming the keyword meant.
Without the check such a word would silently become a benchmark argument, a
target or a label.  A benchmark argument that is really spelt so goes after
``ARGS``: ``COMMAND bench --n 100 ARGS --layout UNITS``.  A word that is
exactly a keyword always starts that keyword, also after ``ARGS``.

CTest
^^^^^

Each registration is also a test labelled ``compileiq`` (plus its ``LABELS``,
and ``gpu`` for benchmarks of CUDA targets):
``ctest -L compileiq`` runs the benchmarks with the current flags, after
``enable_testing()`` (or ``include(CTest)``) in the project.  Benchmarks of
CUDA targets ask for one GPU each (``RESOURCE_GROUPS gpus:1``); the module
writes a resource spec of this machine's GPUs (``<build>/compileiq/ctest-resources.json``)
and sets ``CTEST_RESOURCE_SPEC_FILE``, so CTest runs one benchmark per GPU at a time.

What the module writes and reads
^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^

At the end of the configure step it writes
``<build>/compileiq/manifest.json`` (targets, benchmarks, compilers) for the
driver.  Its fields, section by section, are those of ``manifest_fields.json``
beside this file (each with its type, and the variable or property it comes
from), which the driver reads too; that file ships with this one.

Variables read:

``COMPILEIQ_FLAGS_<target>_<LANG>_<arch>`` / ``COMPILEIQ_FLAGS_<target>_<LANG>_portable``
  Tuned flags, set by a toolchain file written by ``compileiq_build``.
  ``<target>`` is the target name (for a group ``<target>:<group>``) made a C
  identifier; ``<arch>`` is
  ``sm_<NN>`` for CUDA (used when the target builds for exactly that one
  architecture) and the host processor (``x86_64``) for CXX.  The portable set
  is used otherwise.

``COMPILEIQ_TOOLCHAIN_FORMAT`` (set by the toolchain file)
  The file's format; a newer format than this module reads stops the configure.

``COMPILEIQ_TOOLCHAIN_UNITS`` (set by the toolchain file)
  The targets and groups the file decides (with flags or kept at the project's).  The
  configure warns, once, about tuned units the file has no flags for here, and about
  names in this list that the project no longer tunes (renamed or removed).

The flags are applied by ``CompileIQApply.cmake`` beside this file; each toolchain
file holds a copy of it, so that a build without the Python package gets the same
flags on the same targets and groups.

``COMPILEIQ_CANDIDATE_FLAGS`` (set by the driver in its own build trees)
  Read each tuned target's flags from ``<build>/compileiq/candidate/<target>.<LANG>.opts``,
  so that candidates change without re-configuring.  Tuned flags from a
  toolchain file are not applied then: the baseline is the project's own flags.

``COMPILEIQ_TUNING_ARCH`` (set by the driver)
  Compile tuned CUDA targets to real machine code for this architecture
  (e.g. ``90`` gives ``90-real``), so that device options are not lost to
  just-in-time compilation of PTX.
#]=======================================================================]

include_guard(GLOBAL)

if(CMAKE_VERSION VERSION_LESS 3.24)
  message(FATAL_ERROR
    "CompileIQ needs CMake 3.24 or newer; this is ${CMAKE_VERSION}. "
    "Install a newer one, e.g. `python -m pip install cmake`.")
endif()

set(COMPILEIQ_VERSION "0.1.0")
set(_COMPILEIQ_TOOLCHAIN_FORMAT 1)
if(COMPILEIQ_TOOLCHAIN_FORMAT GREATER _COMPILEIQ_TOOLCHAIN_FORMAT)
  message(FATAL_ERROR
    "CompileIQ: the toolchain file is in format ${COMPILEIQ_TOOLCHAIN_FORMAT}, written by a newer "
    "compileiq_build; this CompileIQ ${COMPILEIQ_VERSION} reads format ${_COMPILEIQ_TOOLCHAIN_FORMAT}. "
    "Upgrade it (python -m pip install -U compileiq-build), or configure without the toolchain file.")
endif()
set(_COMPILEIQ_LANGUAGES CUDA CXX)
# What applies a toolchain file's flags; every toolchain file also holds a copy of it.
include("${CMAKE_CURRENT_LIST_DIR}/CompileIQApply.cmake")
set(_COMPILEIQ_FORMATS auto nvbench gbench csv regex time)
set(_COMPILEIQ_UNITS s ms us ns)

# The manifest's fields, per section, from manifest_fields.json (the table project.py reads
# too): for each section the global property _COMPILEIQ_FIELDS_<section> lists the field names,
# and _COMPILEIQ_FIELD_<section>.<name> holds "<type>;<cmake variable>;<written>".
function(_compileiq_read_fields file)
  set(broken "Reinstall compileiq-build (python -m pip install --force-reinstall compileiq-build), or "
             "restore the file from its source tree, and configure again.")
  string(JOIN "" broken ${broken})
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "CompileIQ: ${file} is missing; it lists the manifest's fields. ${broken}")
  endif()
  file(READ "${file}" table)
  string(JSON schema ERROR_VARIABLE err GET "${table}" schema)
  if(NOT err)
    string(JSON sections ERROR_VARIABLE err GET "${table}" sections)
  endif()
  if(NOT err)
    string(JSON count ERROR_VARIABLE err LENGTH "${sections}")
  endif()
  if(err)
    message(FATAL_ERROR "CompileIQ: ${file} is not a field table (${err}). ${broken}")
  endif()
  set_property(GLOBAL PROPERTY _COMPILEIQ_MANIFEST_SCHEMA "${schema}")
  math(EXPR last "${count} - 1")
  foreach(s RANGE ${last})
    string(JSON section MEMBER "${sections}" ${s})
    string(JSON fields GET "${sections}" "${section}" fields)
    string(JSON n LENGTH "${fields}")
    math(EXPR n "${n} - 1")
    set(names "")
    foreach(i RANGE ${n})
      foreach(key name type cmake written)
        string(JSON ${key} ERROR_VARIABLE err GET "${fields}" ${i} ${key})
        if(err)
          message(FATAL_ERROR "CompileIQ: ${file}: field ${i} of ${section} lacks '${key}'. ${broken}")
        endif()
      endforeach()
      if(NOT type MATCHES "^(string|strings|bool|int|map|list)$" OR NOT written MATCHES "^(always|if_defined)$")
        message(FATAL_ERROR
          "CompileIQ: ${file}: ${section}.${name} has type '${type}', written '${written}', which this "
          "CompileIQ.cmake cannot write. ${broken}")
      endif()
      list(APPEND names "${name}")
      set_property(GLOBAL PROPERTY "_COMPILEIQ_FIELD_${section}.${name}" "${type};${cmake};${written}")
    endforeach()
    set_property(GLOBAL PROPERTY "_COMPILEIQ_FIELDS_${section}" "${names}")
  endforeach()
endfunction()
_compileiq_read_fields("${CMAKE_CURRENT_LIST_DIR}/manifest_fields.json")

# The manifest needs every target and benchmark, so it is written once the
# top-level directory has been processed.
get_property(_compileiq_deferred GLOBAL PROPERTY _COMPILEIQ_DEFERRED)
if(NOT _compileiq_deferred)
  set_property(GLOBAL PROPERTY _COMPILEIQ_DEFERRED TRUE)
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _compileiq_finalize)
endif()

# The fewest edits that turn <a> into <b>: a character inserted, deleted or replaced, or
# two neighbours swapped (the optimal string alignment distance).  Computed row by row:
# <prev> holds the distances from the first i-1 characters of <a> to each prefix of <b>,
# <before> those from the first i-2.
function(_compileiq_edit_distance a b out)
  string(LENGTH "${a}" la)
  string(LENGTH "${b}" lb)
  set(before "")
  set(prev "")
  foreach(j RANGE ${lb})
    list(APPEND prev ${j})
  endforeach()
  foreach(i RANGE 1 ${la})
    math(EXPR i1 "${i} - 1")
    string(SUBSTRING "${a}" ${i1} 1 ca)
    set(row ${i})
    foreach(j RANGE 1 ${lb})
      math(EXPR j1 "${j} - 1")
      string(SUBSTRING "${b}" ${j1} 1 cb)
      list(GET prev ${j1} replace)
      if(NOT ca STREQUAL cb)
        math(EXPR replace "${replace} + 1")
      endif()
      list(GET prev ${j} delete)
      list(GET row ${j1} insert)
      math(EXPR best "${delete} + 1")
      math(EXPR insert "${insert} + 1")
      foreach(d ${insert} ${replace})
        if(d LESS best)
          set(best ${d})
        endif()
      endforeach()
      if(i GREATER 1 AND j GREATER 1)
        math(EXPR i2 "${i} - 2")
        math(EXPR j2 "${j} - 2")
        string(SUBSTRING "${a}" ${i2} 1 pa)
        string(SUBSTRING "${b}" ${j2} 1 pb)
        list(GET before ${j2} swap)
        math(EXPR swap "${swap} + 1")
        if(ca STREQUAL pb AND pa STREQUAL cb AND swap LESS best)
          set(best ${swap})
        endif()
      endif()
      list(APPEND row ${best})
    endforeach()
    set(before "${prev}")
    set(prev "${row}")
  endforeach()
  list(GET prev ${lb} distance)
  set(${out} ${distance} PARENT_SCOPE)
endfunction()

# The first of the words (ARGN) that looks like a misspelt keyword: capitals, digits and
# '_', three characters or more, not a keyword, and at most two edits from one.  Sets
# <out_word> to it and <out_keyword> to the nearest keyword, or both to "" when none does.
# The caller reports it, so that the error shows the line of the call.
function(_compileiq_misspelt_keyword keywords out_word out_keyword)
  foreach(word IN LISTS ARGN)
    if(NOT word MATCHES "^[A-Z0-9_][A-Z0-9_][A-Z0-9_]+$" OR word IN_LIST keywords)
      continue()
    endif()
    string(LENGTH "${word}" lw)
    set(nearest "")
    set(nearest_distance 3)
    foreach(kw IN LISTS keywords)
      string(LENGTH "${kw}" lk)
      math(EXPR apart "${lw} - ${lk}")
      if(apart GREATER 2 OR apart LESS -2)
        continue()  # more than two edits apart anyway
      endif()
      _compileiq_edit_distance("${word}" "${kw}" d)
      if(d LESS nearest_distance)
        set(nearest "${kw}")
        set(nearest_distance ${d})
      endif()
    endforeach()
    if(nearest)
      set(${out_word} "${word}" PARENT_SCOPE)
      set(${out_keyword} "${nearest}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out_word} "" PARENT_SCOPE)
  set(${out_keyword} "" PARENT_SCOPE)
endfunction()

function(compileiq_tune)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "GROUP" "LANGUAGES;SOURCES")
  _compileiq_misspelt_keyword("LANGUAGES;SOURCES;GROUP" word keyword
                              ${arg_UNPARSED_ARGUMENTS} ${arg_LANGUAGES})
  if(word)
    message(FATAL_ERROR
      "compileiq_tune(): '${word}' looks like a misspelt ${keyword}. Write ${keyword}; a target "
      "that really is named '${word}' can be tuned through an ALIAS target of another name.")
  endif()
  if(NOT arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "compileiq_tune() needs at least one target. "
      "Write: compileiq_tune(<target>... [LANGUAGES CUDA CXX])")
  endif()
  if("LANGUAGES" IN_LIST arg_KEYWORDS_MISSING_VALUES)
    message(FATAL_ERROR
      "compileiq_tune(): LANGUAGES needs at least one of: ${_COMPILEIQ_LANGUAGES}.")
  endif()
  set(group "")
  if(DEFINED arg_SOURCES OR DEFINED arg_GROUP OR "SOURCES" IN_LIST arg_KEYWORDS_MISSING_VALUES
     OR "GROUP" IN_LIST arg_KEYWORDS_MISSING_VALUES)
    list(LENGTH arg_UNPARSED_ARGUMENTS count)
    if(NOT arg_SOURCES)
      message(FATAL_ERROR
        "compileiq_tune(${arg_UNPARSED_ARGUMENTS}): a group needs its files. Write: "
        "compileiq_tune(<target> SOURCES <file-or-glob>... [GROUP <name>]).")
    endif()
    if(NOT count EQUAL 1)
      message(FATAL_ERROR
        "compileiq_tune(${arg_UNPARSED_ARGUMENTS} SOURCES ...): SOURCES are files of one target. "
        "Write one call per target: compileiq_tune(<target> SOURCES <file-or-glob>... [GROUP <name>]).")
    endif()
    set(group "${arg_GROUP}")
    if(NOT DEFINED arg_GROUP)
      _compileiq_group_name("${arg_SOURCES}" group)
    endif()
    if(NOT group MATCHES "^[A-Za-z0-9_.+-]+$")
      message(FATAL_ERROR
        "compileiq_tune(${arg_UNPARSED_ARGUMENTS}): the group name '${group}' may hold only letters, "
        "digits and _ . + -. Write GROUP <name>.")
    endif()
  endif()
  set(languages ${arg_LANGUAGES})
  if(NOT languages)
    # The default, CUDA, said here, where the call's line shows, rather than at the end of the
    # configure step (CMakeLists.txt:DEFERRED) about a LANGUAGES CUDA the call does not write.
    get_property(enabled GLOBAL PROPERTY ENABLED_LANGUAGES)
    if(NOT "CUDA" IN_LIST enabled)
      list(JOIN arg_UNPARSED_ARGUMENTS " " named)
      message(FATAL_ERROR
        "compileiq_tune(${named}): without LANGUAGES it tunes the targets' CUDA sources, and the "
        "project does not enable CUDA. For C++ write compileiq_tune(${named} LANGUAGES CXX); for "
        "CUDA add it to project(... LANGUAGES ...) or call enable_language(CUDA) before this line.")
    endif()
    set(languages CUDA)
  endif()
  foreach(lang IN LISTS languages)
    if(NOT lang IN_LIST _COMPILEIQ_LANGUAGES)
      message(FATAL_ERROR
        "compileiq_tune(): unknown language '${lang}'. "
        "Write LANGUAGES with one or more of: ${_COMPILEIQ_LANGUAGES}.")
    endif()
  endforeach()
  foreach(tgt IN LISTS arg_UNPARSED_ARGUMENTS)
    _compileiq_real_target("${tgt}" tgt)
    get_target_property(imported "${tgt}" IMPORTED)
    get_target_property(type "${tgt}" TYPE)
    if(imported OR type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
      message(FATAL_ERROR
        "compileiq_tune(): '${tgt}' is an imported, interface or utility target and "
        "compiles nothing. Name the library or executable that compiles the sources.")
    endif()
    _compileiq_mark("${tgt}" "${group}" "${languages}" "${arg_SOURCES}")
  endforeach()
endfunction()

function(compileiq_add_benchmark name)
  set(options HIGHER_IS_BETTER)
  set(one_value FORMAT REGEX COLUMN UNIT WORKDIR TIMEOUT CHECKSUM OUTPUT_FILE TOLERANCE)
  set(multi_value COMMAND ARGS TARGETS LABELS CHECK)
  set(keywords ${options} ${one_value} ${multi_value})
  cmake_parse_arguments(PARSE_ARGV 1 arg "${options}" "${one_value}" "${multi_value}")
  set(usage "Write: compileiq_add_benchmark(<name> COMMAND <executable-target> [args...] [ARGS <arg>...] "
            "[TARGETS <tuned-target>...] [FORMAT auto|nvbench|gbench|csv|regex|time] [REGEX <re>] "
            "[UNIT s|ms|us|ns] [HIGHER_IS_BETTER] [CHECKSUM <re>] [OUTPUT_FILE <path>] "
            "[TOLERANCE <relative>] [CHECK <executable-target-or-program> [args...]] [WORKDIR <dir>] "
            "[TIMEOUT <s>] [LABELS ...])")
  string(JOIN "" usage ${usage})
  if(name IN_LIST keywords)
    message(FATAL_ERROR "compileiq_add_benchmark(): the first argument must be the benchmark's name. ${usage}")
  endif()
  # The executable (COMMAND's first word) is a name, not a place for a misplaced keyword.
  set(command_args "${arg_COMMAND}")
  list(POP_FRONT command_args)
  _compileiq_misspelt_keyword("${keywords}" word keyword
                              ${arg_UNPARSED_ARGUMENTS} ${command_args} ${arg_TARGETS} ${arg_LABELS})
  if(word)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): '${word}' looks like a misspelt ${keyword}. Write ${keyword}; "
      "an argument of the benchmark that really is '${word}' goes after ARGS, which passes its "
      "words as written: ARGS ${word} ...")
  endif()
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): unknown argument(s) '${arg_UNPARSED_ARGUMENTS}'. ${usage}")
  endif()
  if(NOT arg_COMMAND)
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): COMMAND is missing. ${usage}")
  endif()
  if("CHECK" IN_LIST arg_KEYWORDS_MISSING_VALUES)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): CHECK needs a command, e.g. CHECK <executable-target> --verify: "
      "it runs once per candidate and must exit 0.")
  endif()
  if(DEFINED arg_ARGS)
    list(APPEND arg_COMMAND "${arg_ARGS}")
  endif()
  if(NOT arg_FORMAT)
    set(arg_FORMAT auto)
  endif()
  if(NOT arg_FORMAT IN_LIST _COMPILEIQ_FORMATS)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): unknown FORMAT '${arg_FORMAT}'. Use one of: ${_COMPILEIQ_FORMATS}.")
  endif()
  if(arg_FORMAT STREQUAL "regex" AND NOT DEFINED arg_REGEX)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): FORMAT regex needs REGEX <re> whose first capture "
      "group is the measured value, e.g. REGEX \"time_ms: ([0-9.eE+-]+)\" UNIT ms.")
  endif()
  if(DEFINED arg_REGEX AND NOT arg_FORMAT MATCHES "^(regex|auto)$")
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): REGEX goes with FORMAT regex, not ${arg_FORMAT}.")
  endif()
  if(DEFINED arg_REGEX)
    set(arg_FORMAT regex)
    # A capture group: '(' not escaped and not '(?:', '(?=', ...; or a group named value.
    string(REGEX REPLACE "\\\\." "" plain "${arg_REGEX}")
    if(NOT plain MATCHES "\\([^?]|\\(\\?P?<value>")
      message(FATAL_ERROR
        "compileiq_add_benchmark(${name}): REGEX \"${arg_REGEX}\" has no capture group for the "
        "measured value. Put parentheses around the number, e.g. REGEX \"time_ms: ([0-9.eE+-]+)\".")
    endif()
  endif()
  if(arg_FORMAT STREQUAL "csv" AND NOT DEFINED arg_COLUMN)
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): FORMAT csv needs COLUMN <name of the measured column>.")
  endif()
  if(DEFINED arg_UNIT AND NOT arg_UNIT IN_LIST _COMPILEIQ_UNITS)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): unknown UNIT '${arg_UNIT}'. Use one of: ${_COMPILEIQ_UNITS}; "
      "for a rate (GFLOPS, GB/s) leave UNIT out and write HIGHER_IS_BETTER.")
  endif()
  if(DEFINED arg_UNIT AND arg_HIGHER_IS_BETTER)
    message(FATAL_ERROR
      "compileiq_add_benchmark(${name}): UNIT names a time, but HIGHER_IS_BETTER says the value is a rate. "
      "Keep one of them.")
  endif()
  if(DEFINED arg_TIMEOUT AND NOT arg_TIMEOUT MATCHES "^[0-9]+(\\.[0-9]+)?$")
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): TIMEOUT must be a number of seconds, not '${arg_TIMEOUT}'.")
  endif()
  if(DEFINED arg_TOLERANCE AND NOT arg_TOLERANCE MATCHES "^[0-9]+(\\.[0-9]*)?([eE][-+]?[0-9]+)?$")
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): TOLERANCE must be a relative tolerance such as 1e-4, not '${arg_TOLERANCE}'.")
  endif()
  if(DEFINED arg_TOLERANCE AND NOT DEFINED arg_CHECKSUM AND NOT DEFINED arg_OUTPUT_FILE)
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): TOLERANCE applies to CHECKSUM or OUTPUT_FILE; add one of them.")
  endif()
  if(DEFINED arg_CHECKSUM AND NOT arg_CHECKSUM MATCHES "\\(")
    message(FATAL_ERROR "compileiq_add_benchmark(${name}): CHECKSUM needs a capture group around the checksum, e.g. CHECKSUM \"checksum: (\\\\S+)\".")
  endif()
  if(NOT DEFINED arg_UNIT AND NOT arg_HIGHER_IS_BETTER)
    set(arg_UNIT s)
  endif()
  if(NOT DEFINED arg_WORKDIR)
    set(arg_WORKDIR "${CMAKE_CURRENT_BINARY_DIR}")
  elseif(NOT IS_ABSOLUTE "${arg_WORKDIR}")
    set(arg_WORKDIR "${CMAKE_CURRENT_BINARY_DIR}/${arg_WORKDIR}")
  endif()

  get_property(count GLOBAL PROPERTY _COMPILEIQ_BENCH_COUNT)
  if(NOT count)
    set(count 0)
  endif()
  set(prefix _COMPILEIQ_BENCH_${count})
  math(EXPR count "${count} + 1")
  set_property(GLOBAL PROPERTY _COMPILEIQ_BENCH_COUNT ${count})
  set_property(GLOBAL PROPERTY ${prefix}_NAME "${name}")
  set_property(GLOBAL PROPERTY ${prefix}_COMMAND "${arg_COMMAND}")
  set_property(GLOBAL PROPERTY ${prefix}_TARGETS "${arg_TARGETS}")
  set_property(GLOBAL PROPERTY ${prefix}_FORMAT "${arg_FORMAT}")
  set_property(GLOBAL PROPERTY ${prefix}_REGEX "${arg_REGEX}")
  set_property(GLOBAL PROPERTY ${prefix}_COLUMN "${arg_COLUMN}")
  set_property(GLOBAL PROPERTY ${prefix}_UNIT "${arg_UNIT}")
  set_property(GLOBAL PROPERTY ${prefix}_HIGHER "${arg_HIGHER_IS_BETTER}")
  set_property(GLOBAL PROPERTY ${prefix}_WORKDIR "${arg_WORKDIR}")
  set_property(GLOBAL PROPERTY ${prefix}_TIMEOUT "${arg_TIMEOUT}")
  set_property(GLOBAL PROPERTY ${prefix}_LABELS "${arg_LABELS}")
  set_property(GLOBAL PROPERTY ${prefix}_CHECKSUM "${arg_CHECKSUM}")
  set_property(GLOBAL PROPERTY ${prefix}_OUTPUT_FILE "${arg_OUTPUT_FILE}")
  set_property(GLOBAL PROPERTY ${prefix}_TOLERANCE "${arg_TOLERANCE}")
  set_property(GLOBAL PROPERTY ${prefix}_CHECK "${arg_CHECK}")
  set_property(GLOBAL PROPERTY ${prefix}_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
endfunction()

# --- everything below runs at the end of the configure step -----------------
# (with what CompileIQApply.cmake defines)

# In the driver's build trees each tuned target (or group: <sources>, its files of <lang>)
# reads its flags from a file, and its objects depend on that file: a new candidate rebuilds
# exactly them.  Sets <out_file> and <out_file>_sources (how many sources of <lang> read it).
function(_compileiq_use_candidate_file tgt lang id sources out_file)
  set(file "${CMAKE_BINARY_DIR}/compileiq/candidate/${id}.${lang}.opts")
  if(NOT EXISTS "${file}")
    file(WRITE "${file}" "")
  endif()
  # Named relative to the build folder, where Ninja runs every command: the command is then
  # the same in all of the driver's trees, and a tree seeded with another's objects rebuilds
  # only those whose flags file differs.  nvcc's option in two words, not
  # --options-file=<file>: ccache reads the file's flags into its hash only so (and expands
  # g++'s @file), else every candidate would get the baseline's object from the cache.  A
  # target's options are de-duplicated, hence SHELL: there; a source's are not, and take none.
  file(RELATIVE_PATH rel "${CMAKE_BINARY_DIR}" "${file}")
  set(words "@${rel}")
  set(opt "@${rel}")
  if(lang STREQUAL "CUDA")
    set(words --options-file "${rel}")
    set(opt "SHELL:--options-file \"${rel}\"")
  endif()
  if(sources)  # a group's files of <lang>
    set(plain "${sources}")
    set_property(SOURCE ${plain} TARGET_DIRECTORY "${tgt}" APPEND PROPERTY COMPILE_OPTIONS ${words})
  else()
    set_property(TARGET "${tgt}" APPEND PROPERTY COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:${lang}>:${opt}>")
    if(lang STREQUAL "CUDA")
      _compileiq_device_link_options("${tgt}" "${opt}")
    endif()
    _compileiq_target_sources("${tgt}" all)
    _compileiq_sources_of_language("${tgt}" "${lang}" "${all}" plain)
  endif()
  if(plain)
    set_property(SOURCE ${plain} TARGET_DIRECTORY "${tgt}" APPEND PROPERTY OBJECT_DEPENDS "${file}")
  endif()
  list(LENGTH plain count)
  set(${out_file} "${file}" PARENT_SCOPE)
  set(${out_file}_sources ${count} PARENT_SCOPE)
endfunction()

# Tuned targets that <tgt> links, directly or through other targets.
function(_compileiq_linked_tuned tgt tuned out)
  set(seen "")
  set(queue "${tgt}")
  set(found "")
  while(queue)
    list(POP_FRONT queue cur)
    if(cur IN_LIST seen OR NOT TARGET "${cur}")
      continue()
    endif()
    list(APPEND seen "${cur}")
    get_target_property(aliased "${cur}" ALIASED_TARGET)
    if(aliased)
      set(cur "${aliased}")
    endif()
    if(cur IN_LIST tuned)
      list(APPEND found "${cur}")
    endif()
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(libs "${cur}" ${prop})
      if(libs)
        foreach(lib IN LISTS libs)
          string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
          if(TARGET "${lib}")
            list(APPEND queue "${lib}")
          endif()
        endforeach()
      endif()
    endforeach()
  endwhile()
  list(REMOVE_DUPLICATES found)
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# string(JSON) takes JSON text for values: quote and escape a plain string.
function(_compileiq_json_string out value)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  string(REPLACE "\n" "\\n" value "${value}")
  string(REPLACE "\t" "\\t" value "${value}")
  set(${out} "\"${value}\"" PARENT_SCOPE)
endfunction()

function(_compileiq_json_strings out)
  set(json "[]")
  set(i 0)
  foreach(v IN LISTS ARGN)
    _compileiq_json_string(q "${v}")
    string(JSON json SET "${json}" ${i} "${q}")
    math(EXPR i "${i} + 1")
  endforeach()
  set(${out} "${json}" PARENT_SCOPE)
endfunction()

# Sets the fields of <section> (manifest_fields.json) in the JSON object in variable <var>, each
# from the variable the table names for it ("cmake"), as the caller sees it: a string, a list
# (strings), a condition (bool), or JSON text (int, map, list).  A field written "if_defined"
# is left out where its variable is not defined; callers unset those first.  The locals are
# named _cf_* so that they hide none of the caller's variables.
function(_compileiq_json_fields _cf_var _cf_section)
  get_property(_cf_names GLOBAL PROPERTY "_COMPILEIQ_FIELDS_${_cf_section}")
  set(_cf_json "${${_cf_var}}")
  foreach(_cf_name IN LISTS _cf_names)
    get_property(_cf_spec GLOBAL PROPERTY "_COMPILEIQ_FIELD_${_cf_section}.${_cf_name}")
    list(GET _cf_spec 0 _cf_type)
    list(GET _cf_spec 1 _cf_src)
    list(GET _cf_spec 2 _cf_written)
    if(_cf_written STREQUAL "if_defined" AND NOT DEFINED ${_cf_src})
      continue()
    endif()
    if(_cf_type STREQUAL "string")
      _compileiq_json_string(_cf_value "${${_cf_src}}")
    elseif(_cf_type STREQUAL "strings")
      _compileiq_json_strings(_cf_value ${${_cf_src}})
    elseif(_cf_type STREQUAL "bool")
      set(_cf_condition "${${_cf_src}}")
      set(_cf_value false)
      if(_cf_condition)
        set(_cf_value true)
      endif()
    else()
      set(_cf_value "${${_cf_src}}")
    endif()
    string(JSON _cf_json SET "${_cf_json}" "${_cf_name}" "${_cf_value}")
  endforeach()
  set(${_cf_var} "${_cf_json}" PARENT_SCOPE)
endfunction()

# The languages tuned in <unit>, a tuned target (all its groups') or <target>:<group>;
# empty when <unit> is not tuned.
function(_compileiq_unit_languages unit tuned out)
  set(langs "")
  if(unit IN_LIST tuned)
    get_target_property(langs "${unit}" COMPILEIQ_LANGUAGES)
    get_target_property(groups "${unit}" COMPILEIQ_GROUPS)
    foreach(g IN LISTS groups)
      get_target_property(glangs "${unit}" "COMPILEIQ_GROUP_${g}_LANGUAGES")
      list(APPEND langs ${glangs})
    endforeach()
  elseif(unit MATCHES "^(.+):([^:]+)$" AND CMAKE_MATCH_1 IN_LIST tuned)
    get_target_property(langs "${CMAKE_MATCH_1}" "COMPILEIQ_GROUP_${CMAKE_MATCH_2}_LANGUAGES")
  endif()
  list(FILTER langs EXCLUDE REGEX "-NOTFOUND$")
  set(${out} "${langs}" PARENT_SCOPE)
endfunction()

# Each registration is also a CTest test; those of CUDA targets hold one GPU.
function(_compileiq_add_ctest name index exe args workdir labels targets)
  set(test "compileiq.${name}.${index}")
  add_test(NAME "${test}" COMMAND "${exe}" ${args} WORKING_DIRECTORY "${workdir}")
  set(all_labels compileiq ${labels})
  get_property(tuned GLOBAL PROPERTY _COMPILEIQ_TUNED)
  foreach(t IN LISTS targets)
    _compileiq_unit_languages("${t}" "${tuned}" langs)
    if("CUDA" IN_LIST langs)
      list(APPEND all_labels gpu)
      set_tests_properties("${test}" PROPERTIES RESOURCE_GROUPS "gpus:1")
      break()
    endif()
  endforeach()
  set_tests_properties("${test}" PROPERTIES LABELS "${all_labels}")
endfunction()

# A CTest resource spec with this machine's GPUs (none where nvidia-smi finds none).
function(_compileiq_gpu_resource_spec)
  set(ids "")
  find_program(_compileiq_nvidia_smi nvidia-smi)
  if(_compileiq_nvidia_smi)
    execute_process(COMMAND "${_compileiq_nvidia_smi}" --query-gpu=index --format=csv,noheader
                    OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+" ids "${out}")
    endif()
  endif()
  set(gpus "")
  foreach(id IN LISTS ids)
    list(APPEND gpus "{\"id\": \"${id}\", \"slots\": 1}")
  endforeach()
  list(JOIN gpus ", " gpus)
  set(spec "${CMAKE_BINARY_DIR}/compileiq/ctest-resources.json")
  file(WRITE "${spec}" "{\"version\": {\"major\": 1, \"minor\": 0}, \"local\": [{\"gpus\": [${gpus}]}]}\n")
  set(CTEST_RESOURCE_SPEC_FILE "${spec}" CACHE FILEPATH "CTest resource spec (written by CompileIQ)")
endfunction()



# The manifest entry of one tuned unit (section targets, its per_language entries): target
# <tgt> whole (<group> "") or one group of its <sources>, switched to its candidate files or
# given its tuned flags.
function(_compileiq_unit out tgt group langs sources cuda_key cuda_archs project_archs host_key)
  set(name "${tgt}")
  if(NOT group STREQUAL "")
    set(name "${tgt}:${group}")
  endif()
  string(MAKE_C_IDENTIFIER "${name}" id)
  get_target_property(type "${tgt}" TYPE)
  get_target_property(tdir "${tgt}" SOURCE_DIR)
  _compileiq_unit_files("${tgt}" "${sources}" "${langs}" files)
  if(NOT COMPILEIQ_CANDIDATE_FLAGS)
    _compileiq_check_sources("${name}" "${id}" "${files}")
  endif()
  set(per_language "{}")
  foreach(lang IN LISTS langs)
    # The fields written "if_defined": CUDA's architectures, the driver's candidate files.
    foreach(v lang_project_archs lang_archs candidate_file candidate_file_sources)
      unset(${v})
    endforeach()
    set(plain "")
    if(sources)
      _compileiq_sources_of_language("${tgt}" "${lang}" "${sources}" plain)
      if(NOT plain)
        message(FATAL_ERROR
          "compileiq_tune(${tgt} ... GROUP ${group}): none of the group's files compiles as ${lang}. "
          "Name ${lang} sources in SOURCES, or write the group's LANGUAGES.")
      endif()
    endif()
    set(key "${host_key}")
    if(lang STREQUAL "CUDA")
      set(key "${cuda_key}")
      set(lang_project_archs "${project_archs}")
      set(lang_archs "${cuda_archs}")
    endif()
    set(applied "")
    if(COMPILEIQ_CANDIDATE_FLAGS)
      _compileiq_use_candidate_file("${tgt}" "${lang}" "${id}" "${plain}" candidate_file)
    else()
      _compileiq_apply_tuned("${name}" "${tgt}" "${lang}" "${id}" "${key}" "${plain}" "${cuda_archs}" applied)
    endif()
    set(l "{}")
    _compileiq_json_fields(l per_language)
    string(JSON per_language SET "${per_language}" ${lang} "${l}")
  endforeach()
  set(t "{}")
  _compileiq_json_fields(t targets)
  set(${out} "${t}" PARENT_SCOPE)
endfunction()

# The languages tuned in <tgt> (<out_langs>: whole, <out_whole>, or in groups, <out_groups>),
# each of which the project must enable.
function(_compileiq_target_languages tgt enabled out_whole out_groups out_langs)
  get_target_property(whole "${tgt}" COMPILEIQ_LANGUAGES)
  get_target_property(groups "${tgt}" COMPILEIQ_GROUPS)
  foreach(v whole groups)
    if(NOT ${v})
      set(${v} "")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES groups)
  if(whole AND groups)
    list(JOIN groups ", " shown)
    message(FATAL_ERROR
      "CompileIQ: ${tgt} is tuned whole (compileiq_tune(${tgt})) and in groups (${shown}); the "
      "whole target's flags would reach the groups' sources too. Tune it either whole or in "
      "groups; to tune its other sources as well, make a group of them.")
  endif()
  set(langs "${whole}")
  foreach(g IN LISTS groups)
    get_target_property(glangs "${tgt}" "COMPILEIQ_GROUP_${g}_LANGUAGES")
    list(APPEND langs ${glangs})
  endforeach()
  list(REMOVE_DUPLICATES langs)
  foreach(lang IN LISTS langs)
    if(NOT lang IN_LIST enabled)
      message(FATAL_ERROR
        "compileiq_tune(${tgt} LANGUAGES ${lang}): the project does not enable ${lang}. "
        "Add it to project(... LANGUAGES ...) or enable_language(${lang}), or drop it from LANGUAGES.")
    endif()
  endforeach()
  set(${out_whole} "${whole}" PARENT_SCOPE)
  set(${out_groups} "${groups}" PARENT_SCOPE)
  set(${out_langs} "${langs}" PARENT_SCOPE)
endfunction()

# The CUDA architecture key of tuned target <tgt>, the architectures it is built for here and
# those the project builds it for; with COMPILEIQ_TUNING_ARCH it is switched to real machine
# code for that architecture.
function(_compileiq_cuda_setup tgt out_key out_archs out_project_archs)
  _compileiq_cuda_arch_key("${tgt}" cuda_key project_archs)
  set(cuda_archs "${project_archs}")
  if(COMPILEIQ_TUNING_ARCH)
    set_property(TARGET "${tgt}" PROPERTY CUDA_ARCHITECTURES "${COMPILEIQ_TUNING_ARCH}-real")
    # Also explicitly: a project may pass -arch=sm_XX in CMAKE_CUDA_FLAGS (policy CMP0104
    # OLD), which the property does not override; the GPU then runs this machine code.
    set(gencode "--generate-code=arch=compute_${COMPILEIQ_TUNING_ARCH}$<COMMA>code=sm_${COMPILEIQ_TUNING_ARCH}")
    set_property(TARGET "${tgt}" APPEND PROPERTY COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:${gencode}>")
    _compileiq_device_link_options("${tgt}" "${gencode}")  # the executable links that code
    _compileiq_cuda_arch_key("${tgt}" cuda_key cuda_archs)
  endif()
  set(${out_key} "${cuda_key}" PARENT_SCOPE)
  set(${out_archs} "${cuda_archs}" PARENT_SCOPE)
  set(${out_project_archs} "${project_archs}" PARENT_SCOPE)
endfunction()

# The units of tuned target <tgt> (itself, or its groups) appended to the JSON array in
# variable <targets_var>, their ids and names to the lists <ids_var> and <names_var>: no two
# units may share an id, nor two groups a source.
function(_compileiq_target_units tgt enabled host_key targets_var ids_var names_var)
  set(targets "${${targets_var}}")
  set(ids "${${ids_var}}")
  set(id_names "${${names_var}}")
  _compileiq_target_languages("${tgt}" "${enabled}" whole groups langs)
  set(cuda_key "")
  set(cuda_archs "")
  set(project_archs "")
  if("CUDA" IN_LIST langs)
    _compileiq_cuda_setup("${tgt}" cuda_key cuda_archs project_archs)
  endif()
  set(units "")
  if(whole)
    set(units "-")  # the whole target: a name no group can have
  endif()
  list(APPEND units ${groups})
  set(claimed "")
  set(claimed_by "")
  foreach(unit IN LISTS units)
    set(sources "")
    set(group "")
    set(ulangs "${whole}")
    if(NOT unit STREQUAL "-")
      set(group "${unit}")
      get_target_property(ulangs "${tgt}" "COMPILEIQ_GROUP_${group}_LANGUAGES")
      _compileiq_group_sources("${tgt}" "${group}" sources)
      foreach(src IN LISTS sources)
        list(FIND claimed "${src}" at)
        if(at GREATER -1)
          list(GET claimed_by ${at} other)
          message(FATAL_ERROR
            "CompileIQ: ${src} is in groups ${other} and ${group} of ${tgt}; a source gets the "
            "flags of one group. Leave it out of one of their SOURCES.")
        endif()
        list(APPEND claimed "${src}")
        list(APPEND claimed_by "${group}")
      endforeach()
    endif()
    _compileiq_unit(t "${tgt}" "${group}" "${ulangs}" "${sources}" "${cuda_key}" "${cuda_archs}"
                    "${project_archs}" "${host_key}")
    string(JSON id GET "${t}" id)
    string(JSON name GET "${t}" name)
    list(FIND ids "${id}" at)
    if(at GREATER -1)
      list(GET id_names ${at} other)
      message(FATAL_ERROR
        "CompileIQ: the tuned ${other} and ${name} both become ${id} in the toolchain file's "
        "variable names. Give the group another name (GROUP <name>).")
    endif()
    list(APPEND ids "${id}")
    list(APPEND id_names "${name}")
    string(JSON n LENGTH "${targets}")
    string(JSON targets SET "${targets}" ${n} "${t}")
  endforeach()
  set(${targets_var} "${targets}" PARENT_SCOPE)
  set(${ids_var} "${ids}" PARENT_SCOPE)
  set(${names_var} "${id_names}" PARENT_SCOPE)
endfunction()

# The executable that <word>, the first word of <keyword> (COMMAND, CHECK) of benchmark <name>,
# names: <out_path> is $<TARGET_FILE> of an executable target (<out_target>, an ALIAS
# resolved), else a path relative to <dir>, the call's folder, else a program on the PATH.
function(_compileiq_executable name keyword word dir out_path out_target)
  set(target "")
  if(TARGET "${word}")
    get_target_property(aliased "${word}" ALIASED_TARGET)
    if(aliased)
      set(word "${aliased}")
    endif()
    get_target_property(type "${word}" TYPE)
    if(NOT type STREQUAL "EXECUTABLE")
      message(FATAL_ERROR
        "compileiq_add_benchmark(${name}): ${keyword} '${word}' is a ${type}, not an executable. "
        "Name the add_executable() target to run.")
    endif()
    set(target "${word}")
    set(path "$<TARGET_FILE:${word}>")
  elseif(IS_ABSOLUTE "${word}" OR word MATCHES "/")
    get_filename_component(path "${word}" ABSOLUTE BASE_DIR "${dir}")
  else()
    set(path "${word}")
  endif()
  set(${out_path} "${path}" PARENT_SCOPE)
  set(${out_target} "${target}" PARENT_SCOPE)
endfunction()

# The manifest entry of registration <bi> (section benchmarks), its executable resolved
# through a generator expression; the registration also becomes a CTest test.
function(_compileiq_benchmark out bi tuned)
  set(p _COMPILEIQ_BENCH_${bi})
  foreach(field NAME COMMAND TARGETS FORMAT REGEX COLUMN UNIT HIGHER WORKDIR TIMEOUT LABELS DIR
                CHECKSUM OUTPUT_FILE TOLERANCE CHECK)
    get_property(${field} GLOBAL PROPERTY ${p}_${field})
  endforeach()
  list(POP_FRONT COMMAND exe)
  _compileiq_executable("${NAME}" COMMAND "${exe}" "${DIR}" exe_path exe_target)
  if(exe_target)
    set(exe "${exe_target}")  # an ALIAS resolved
  endif()
  set(check "")  # the CHECK command, its executable resolved as COMMAND's
  set(check_target "")
  if(CHECK)
    list(POP_FRONT CHECK check_exe)
    _compileiq_executable("${NAME}" CHECK "${check_exe}" "${DIR}" check_path check_target)
    set(check "${check_path}" ${CHECK})
  endif()
  foreach(t IN LISTS TARGETS)
    _compileiq_unit_languages("${t}" "${tuned}" langs)
    if(NOT langs)
      message(FATAL_ERROR
        "compileiq_add_benchmark(${NAME}): TARGETS names '${t}', which is not marked for tuning. "
        "Add compileiq_tune(${t}) (for a group <target>:<group>, compileiq_tune(<target> SOURCES ... "
        "GROUP <group>)) or remove it from TARGETS.")
    endif()
  endforeach()
  if(NOT TARGETS)
    if(exe_target)
      _compileiq_linked_tuned("${exe_target}" "${tuned}" TARGETS)
    endif()
    if(NOT TARGETS)
      message(FATAL_ERROR
        "compileiq_add_benchmark(${NAME}): cannot tell which tuned targets this benchmark exercises. "
        "Add TARGETS <tuned-target>... to the call.")
    endif()
  endif()
  set(b "{}")
  _compileiq_json_fields(b benchmarks)
  _compileiq_add_ctest("${NAME}" ${bi} "${exe}" "${COMMAND}" "${WORKDIR}" "${LABELS}" "${TARGETS}")
  set(${out} "${b}" PARENT_SCOPE)
endfunction()

# The compilers of the enabled languages C, CXX and CUDA (section compilers), as a JSON object.
function(_compileiq_compilers out enabled tuned)
  set(compilers "{}")
  foreach(lang IN LISTS enabled)
    if(NOT lang MATCHES "^(C|CXX|CUDA)$")
      continue()
    endif()
    _compileiq_compiler(${lang} "${tuned}" id version)
    set(path "${CMAKE_${lang}_COMPILER}")
    set(flags "${CMAKE_${lang}_FLAGS}")
    foreach(v config_flags cuda_host_compiler cuda_architectures)  # written "if_defined"
      unset(${v})
    endforeach()
    string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
    if(config)
      set(config_flags "${CMAKE_${lang}_FLAGS_${config}}")
    endif()
    if(lang STREQUAL "CUDA")
      set(cuda_host_compiler "${CMAKE_CUDA_HOST_COMPILER}")
      set(cuda_architectures "${CMAKE_CUDA_ARCHITECTURES}")
    endif()
    set(c "{}")
    _compileiq_json_fields(c compilers)
    string(JSON compilers SET "${compilers}" ${lang} "${c}")
  endforeach()
  set(${out} "${compilers}" PARENT_SCOPE)
endfunction()

# Runs at the end of the top-level directory: tuned units switched to candidate files or given
# their tuned flags, benchmarks made CTest tests, and the manifest written, every section's
# fields by manifest_fields.json.
function(_compileiq_finalize)
  get_property(tuned GLOBAL PROPERTY _COMPILEIQ_TUNED)
  list(REMOVE_DUPLICATES tuned)
  get_property(enabled GLOBAL PROPERTY ENABLED_LANGUAGES)
  get_property(schema GLOBAL PROPERTY _COMPILEIQ_MANIFEST_SCHEMA)
  _compileiq_host_key(host_key)
  _compileiq_compilers(compilers "${enabled}" "${tuned}")

  set(targets "[]")
  set(ids "")
  set(id_names "")
  foreach(tgt IN LISTS tuned)
    _compileiq_target_units("${tgt}" "${enabled}" "${host_key}" targets ids id_names)
  endforeach()
  if(NOT COMPILEIQ_CANDIDATE_FLAGS)
    _compileiq_toolchain_names("${id_names}")
  endif()

  get_property(count GLOBAL PROPERTY _COMPILEIQ_BENCH_COUNT)
  if(NOT count)
    set(count 0)
  endif()
  set(benchmarks "[]")
  set(bi 0)
  while(bi LESS count)
    _compileiq_benchmark(b ${bi} "${tuned}")
    string(JSON benchmarks SET "${benchmarks}" ${bi} "${b}")
    math(EXPR bi "${bi} + 1")
  endwhile()
  if(count GREATER 0)
    _compileiq_gpu_resource_spec()
  endif()

  if(NOT tuned)
    message(WARNING "CompileIQ is loaded but no target is marked with compileiq_tune(); there is nothing to tune.")
  endif()
  set(m "{}")
  _compileiq_json_fields(m manifest)
  # A multi-config generator resolves executables per configuration.
  get_property(multi GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(multi)
    set(manifest "${CMAKE_BINARY_DIR}/compileiq/manifest-$<CONFIG>.json")
  else()
    set(manifest "${CMAKE_BINARY_DIR}/compileiq/manifest.json")
  endif()
  file(GENERATE OUTPUT "${manifest}" CONTENT "${m}\n")
endfunction()
