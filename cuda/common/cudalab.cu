// The one exported code-to-text function pair, linked into every library and executable.
#include "cudalab.h"
#include "check.cuh"

extern "C" const char *cudalab_error_name(int code) { return cudaGetErrorName((cudaError_t)code); }
extern "C" const char *cudalab_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
extern "C" int cudalab_clear_error(void) { return (int)cudaGetLastError(); }
// 0 while the context works; after a sticky error (an illegal address, say) the error that broke it,
// which every later call touching the context returns, a synchronisation included. cudaGetLastError
// cannot tell: it resets what it reports, sticky or not.
extern "C" int cudalab_context_check(void) { return (int)cudaDeviceSynchronize(); }
