// The one exported code-to-text function pair, linked into every library and executable.
#include "cudalab.h"
#include "check.cuh"

extern "C" const char *cudalab_error_name(int code) { return cudaGetErrorName((cudaError_t)code); }
extern "C" const char *cudalab_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
extern "C" int cudalab_clear_error(void) { return (int)cudaGetLastError(); }
