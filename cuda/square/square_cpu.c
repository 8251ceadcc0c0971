/* build/bin/square_cpu: the course's CPU program (section 2.7), built with gcc.

     square_cpu [N] [--print K]

   Fills 1..N, squares each element in a plain loop, and optionally prints the first K rows of the
   "Original -> Squared" table. N defaults to 100000. Ends with
     result program=square_cpu n=N loop_ms=... check=pass|fail
   where loop_ms times the squaring loop alone, so `invoke compare square` can set it beside the
   time of the whole process. */
#define _POSIX_C_SOURCE 199309L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *usage = "usage: square_cpu [N] [--print K]";

static void usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "error: %s%s%s\n%s\n", msg, arg ? ": " : "", arg ? arg : "", usage);
    exit(2);
}

static long long parse_int(const char *s, const char *what) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) usage_error(what, s);
    return v;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
    long long n = 100000, print_rows = 0;
    int positional = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--print") == 0) {
            if (i + 1 >= argc) usage_error("--print needs a value", NULL);
            print_rows = parse_int(argv[++i], "--print must be an integer");
            if (print_rows <= 0) usage_error("--print must be positive", argv[i]);
        } else if (positional == 0 && strncmp(argv[i], "--", 2) != 0) {
            n = parse_int(argv[i], "N must be an integer");
            ++positional;
        } else {
            usage_error("unexpected argument", argv[i]);
        }
    }
    if (n <= 0) {
        char got[32];
        snprintf(got, sizeof got, "%lld", n);
        usage_error("N must be a positive number of elements", got);
    }
    if (n > INT_MAX) usage_error("N must be at most 2147483647 (the values 1..N are int)", NULL);

    int *a = malloc((size_t)n * sizeof(int));
    if (a == NULL) {
        fprintf(stderr, "error: cannot allocate %lld ints\n", n);
        return 1;
    }
    for (long long i = 0; i < n; ++i) a[i] = (int)(i + 1);

    double t0 = now_ms();
    /* unsigned multiply: overflow wraps modulo 2^32 (like numpy int32) instead of being undefined */
    for (long long i = 0; i < n; ++i) a[i] = (int)((unsigned)a[i] * (unsigned)a[i]);
    double loop_ms = now_ms() - t0;

    long long bad = 0;
    for (long long i = 0; i < n; ++i) {
        unsigned long long v = (unsigned long long)(i + 1);
        if (a[i] != (int)(unsigned)((v * v) & 0xffffffffULL)) ++bad;
    }
    if (print_rows > 0) {
        printf("%12s -> %12s\n", "Original", "Squared");
        for (long long i = 0; i < n && i < print_rows; ++i) printf("%12lld -> %12d\n", i + 1, a[i]);
    }
    free(a);
    printf("result program=square_cpu n=%lld loop_ms=%.4f mismatches=%lld check=%s\n", n, loop_ms, bad,
           bad == 0 ? "pass" : "fail");
    return bad == 0 ? 0 : 1;
}
