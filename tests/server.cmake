# tests/server.cmake, included from tests/CMakeLists.txt: the suites of edgefl-server's library.
#
#   ctest -R '^server\.'    storage (SQLite: WAL, durability across a killed process, the ledger's
#                           rules), model files (atomic writes, bounded reads), safetensors
#
# Built when server/ is (EDGEFL_BUILD_NET and EDGEFL_BUILD_TOOLS). Other parts of the server add
# their test files to edgefl_server_test_sources and their doctest suites to
# edgefl_server_test_suites (one ctest entry each); server.other runs any suite not listed.
if(TARGET edgefl_server_lib)
  set(edgefl_server_test_sources
      ${CMAKE_CURRENT_LIST_DIR}/server/storage_test.cpp
      ${CMAKE_CURRENT_LIST_DIR}/server/model_files_test.cpp
      ${CMAKE_CURRENT_LIST_DIR}/server/rounds_test.cpp)
  set(edgefl_server_test_suites server.storage server.model_files server.safetensors server.rounds.influence server.rounds.close
                                server.rounds.leases server.rounds.ids server.rounds.seeds
                                server.rounds.logic server.rounds.downlink server.rounds.models server.rounds.secure
                                server.storage.shared server.rounds.aggregators)

  add_executable(edgefl_server_tests ${CMAKE_CURRENT_LIST_DIR}/main.cpp ${edgefl_server_test_sources})
  set_target_properties(edgefl_server_tests PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_features(edgefl_server_tests PRIVATE cxx_std_20)
  target_include_directories(edgefl_server_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(edgefl_server_tests PRIVATE edgefl_server_lib doctest::doctest)
  edgefl_target_options(edgefl_server_tests)
  if(EDGEFL_HAVE_POSTGRESQL)
    target_link_libraries(edgefl_server_tests PRIVATE PkgConfig::EDGEFL_LIBPQ)
    target_compile_definitions(edgefl_server_tests PRIVATE EDGEFL_HAVE_POSTGRESQL=1)
  endif()

  foreach(suite IN LISTS edgefl_server_test_suites)
    add_test(NAME ${suite} COMMAND edgefl_server_tests --test-suite=${suite} --no-intro=true)
    set_tests_properties(${suite} PROPERTIES LABELS unit TIMEOUT 600)
  endforeach()
  # server.storage.postgresql: the ledger's cases, the shared-store cases and the PostgreSQL suite
  # on a private cluster
  # (tests/support/postgres_cluster.sh, PostgreSQL 15 from Debian), started and stopped by the
  # fixture's two entries. The cluster lives under /tmp (PostgreSQL runs as `postgres` under root,
  # and must reach its directory), named after this build tree.
  if(EDGEFL_HAVE_POSTGRESQL)
    string(SHA1 edgefl_build_hash "${CMAKE_BINARY_DIR}")
    string(SUBSTRING "${edgefl_build_hash}" 0 12 edgefl_build_hash)
    set(edgefl_pg_dir "/tmp/edgefl-pg-${edgefl_build_hash}")
    set(edgefl_pg_script ${CMAKE_CURRENT_LIST_DIR}/support/postgres_cluster.sh)
    add_test(NAME postgres.cluster.start
             COMMAND bash -c "bash '${edgefl_pg_script}' stop '${edgefl_pg_dir}' && bash '${edgefl_pg_script}' start '${edgefl_pg_dir}'")
    add_test(NAME postgres.cluster.stop COMMAND bash ${edgefl_pg_script} stop ${edgefl_pg_dir})
    set_tests_properties(postgres.cluster.start PROPERTIES FIXTURES_SETUP edgefl_postgres LABELS unit TIMEOUT 120)
    set_tests_properties(postgres.cluster.stop PROPERTIES FIXTURES_CLEANUP edgefl_postgres LABELS unit TIMEOUT 120)
    add_test(NAME server.storage.postgresql
             COMMAND edgefl_server_tests --test-suite=server.storage,server.storage.shared,server.storage.postgresql
                     --no-intro=true)
    set_tests_properties(server.storage.postgresql PROPERTIES
      LABELS unit TIMEOUT 600 FIXTURES_REQUIRED edgefl_postgres RESOURCE_LOCK edgefl_postgres
      ENVIRONMENT "EDGEFL_TEST_POSTGRES_DIR=${edgefl_pg_dir};EDGEFL_TEST_POSTGRES_SCRIPT=${edgefl_pg_script}")
  endif()
  list(APPEND edgefl_server_test_suites server.storage.postgresql)  # never in server.other
  list(JOIN edgefl_server_test_suites "," edgefl_server_suite_list)
  add_test(NAME server.other COMMAND edgefl_server_tests --test-suite-exclude=${edgefl_server_suite_list}
                                     --no-intro=true)
  set_tests_properties(server.other PROPERTIES LABELS unit TIMEOUT 600)
endif()

# --- edgefl_e2e_tests: the edgefl-server executable end to end (tests/server/e2e_test.cpp) -----
# Each test starts edgefl-server as a child process on loopback (mutual TLS, a fresh development
# PKI and state directory under $TMPDIR) and talks to it as devices do. One ctest entry per doctest
# suite (server.e2e.<suite>); they share one RESOURCE_LOCK, so that at most one server runs at a
# time on small machines, while other test executables may still run beside them.
if(TARGET edgefl-server AND TARGET edgefl_net)
  add_executable(edgefl_e2e_tests ${CMAKE_CURRENT_LIST_DIR}/main.cpp ${CMAKE_CURRENT_LIST_DIR}/server/e2e_test.cpp)
  set_target_properties(edgefl_e2e_tests PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_features(edgefl_e2e_tests PRIVATE cxx_std_20)
  target_include_directories(edgefl_e2e_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(edgefl_e2e_tests PRIVATE edgefl_server_lib edgefl_net_internal edgefl_cli_lib doctest::doctest)
  target_compile_definitions(edgefl_e2e_tests PRIVATE EDGEFL_SERVER_BINARY="$<TARGET_FILE:edgefl-server>")
  add_dependencies(edgefl_e2e_tests edgefl-server)
  edgefl_target_options(edgefl_e2e_tests)

  set(edgefl_e2e_suites rounds rejections resume restart ops faults secure hostile_server)
  foreach(suite IN LISTS edgefl_e2e_suites)
    add_test(NAME server.e2e.${suite} COMMAND edgefl_e2e_tests --test-suite=e2e.${suite} --no-intro=true)
    set_tests_properties(server.e2e.${suite} PROPERTIES LABELS "unit;e2e" TIMEOUT 600 RESOURCE_LOCK edgefl_e2e)
  endforeach()
  # The same rounds on PostgreSQL state (one database per server; the cluster of the
  # edgefl_postgres fixture above): rounds, resumed uploads, SIGKILL restarts, the random kill -9
  # test (20 s), and the database's own crashes under running devices (suite e2e.postgresql, 20 s).
  if(EDGEFL_HAVE_POSTGRESQL)
    target_link_libraries(edgefl_e2e_tests PRIVATE PkgConfig::EDGEFL_LIBPQ)
    target_compile_definitions(edgefl_e2e_tests PRIVATE EDGEFL_HAVE_POSTGRESQL=1)
    add_test(NAME server.e2e.postgresql
             COMMAND edgefl_e2e_tests --test-suite=e2e.rounds,e2e.resume,e2e.restart --no-intro=true)
    add_test(NAME server.e2e.postgresql.kill
             COMMAND edgefl_e2e_tests "--test-case=random kill -9 of the server*" --no-intro=true)
    add_test(NAME server.e2e.postgresql.crash
             COMMAND edgefl_e2e_tests --test-suite=e2e.postgresql --no-intro=true)
    # Three aggregators on one database, the coordinator killed at random (20 s).
    add_test(NAME server.e2e.aggregators
             COMMAND edgefl_e2e_tests --test-suite=e2e.aggregators --no-intro=true)
    set_tests_properties(server.e2e.postgresql server.e2e.postgresql.kill server.e2e.postgresql.crash
                         server.e2e.aggregators PROPERTIES
      LABELS "unit;e2e" TIMEOUT 600 FIXTURES_REQUIRED edgefl_postgres RESOURCE_LOCK "edgefl_e2e;edgefl_postgres"
      ENVIRONMENT "EDGEFL_TEST_POSTGRES_DIR=${edgefl_pg_dir};EDGEFL_TEST_POSTGRES_SCRIPT=${edgefl_pg_script}")
  endif()
  # HAProxy (Debian 12: haproxy) in front, TCP mode, mutual TLS passed through to the server.
  find_program(EDGEFL_HAPROXY haproxy PATHS /usr/sbin)
  if(EDGEFL_HAPROXY AND TARGET edgefl)
    add_test(NAME server.haproxy
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/server/haproxy_test.sh $<TARGET_FILE:edgefl>
                     $<TARGET_FILE:edgefl-server> ${CMAKE_CURRENT_BINARY_DIR}/haproxy_test)
    set_tests_properties(server.haproxy PROPERTIES LABELS "unit;e2e" TIMEOUT 300 RESOURCE_LOCK edgefl_e2e)
    # Three aggregators on the private PostgreSQL cluster behind HAProxy, 200 devices, the
    # coordinator killed -9 half way.
    if(EDGEFL_HAVE_POSTGRESQL)
      add_test(NAME server.haproxy.aggregators
               COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/server/aggregators_test.sh $<TARGET_FILE:edgefl>
                       $<TARGET_FILE:edgefl-server> ${CMAKE_CURRENT_BINARY_DIR}/aggregators_test)
      set_tests_properties(server.haproxy.aggregators PROPERTIES
        LABELS "unit;e2e" TIMEOUT 300 FIXTURES_REQUIRED edgefl_postgres RESOURCE_LOCK "edgefl_e2e;edgefl_postgres"
        ENVIRONMENT "EDGEFL_TEST_POSTGRES_DIR=${edgefl_pg_dir};EDGEFL_TEST_POSTGRES_SCRIPT=${edgefl_pg_script}")
    endif()
  endif()
  list(APPEND edgefl_e2e_suites postgresql aggregators)  # never in server.e2e.other
  list(TRANSFORM edgefl_e2e_suites PREPEND "e2e." OUTPUT_VARIABLE edgefl_e2e_suite_names)
  list(JOIN edgefl_e2e_suite_names "," edgefl_e2e_suite_list)
  add_test(NAME server.e2e.other COMMAND edgefl_e2e_tests --test-suite-exclude=${edgefl_e2e_suite_list}
                                         --no-intro=true)
  set_tests_properties(server.e2e.other PROPERTIES LABELS "unit;e2e" TIMEOUT 600 RESOURCE_LOCK edgefl_e2e)
endif()
