/*
 * scan: the two whole-text passes over an answer that drift's readers
 * make before reading it (scan.c), chosen at run time by the CPU.
 */
#ifndef DRIFT_SCAN_H
#define DRIFT_SCAN_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The whole-text searches (scan.c), AVX2 when the CPU has it, else the
 * baseline (SSE2 or bytes); both give the same answers. drift_scan_n_or_i:
 * whether s[0..len) holds an 'N' or an 'I'. drift_scan_find: the first
 * occurrence of nd (nl >= 4 bytes) in [p, end), as memmem. drift_scan_force
 * (tests): -1 chooses by the CPU (the default), 0 the baseline, 1 AVX2 when
 * drift_scan_has_avx2(); not to be called while other threads scan.
 */
bool drift_scan_n_or_i(const char *s, size_t len);
const char *drift_scan_find(const char *p, const char *end, const char *nd,
                            size_t nl);
void drift_scan_force(int level);
bool drift_scan_has_avx2(void);

#endif
