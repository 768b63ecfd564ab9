/*
 * clock: CLOCK_MONOTONIC as a double of seconds, and nanosleep by
 * milliseconds (clock.h). A double holds a monotonic reading (seconds
 * since boot) to well under a microsecond for centuries, finer than
 * anything its callers time.
 */
#include "core/clock.h"

#include <time.h>

double clock_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void clock_nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
