# How CTest launches multi-rank programs: DTR_MPIEXEC and DTR_MPIRUN_FLAGS.
# --oversubscribe: tests run more ranks than the CI machine's 2 cores;
# --allow-run-as-root: Open MPI refuses root otherwise (CI containers run as root).
find_program(DTR_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE} REQUIRED)
set(DTR_MPIRUN_FLAGS --oversubscribe --bind-to none)
execute_process(COMMAND id -u OUTPUT_VARIABLE _dtr_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_dtr_uid STREQUAL "0")
  list(APPEND DTR_MPIRUN_FLAGS --allow-run-as-root)
endif()
