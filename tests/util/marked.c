/*
 * marked: processes found by an environment marker (see the header).
 */
#include "util/marked.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

double marked_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* True when the environment block env (k bytes) holds the entry mark. */
static int has_entry(char *env, ssize_t k, const char *mark)
{
    env[k] = '\0';
    for (ssize_t i = 0; i < k; i += (ssize_t)strlen(env + i) + 1)
        if (!strcmp(env + i, mark))
            return 1;
    return 0;
}

int marked_count(const char *mark)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char path[300], env[65536];
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/environ", de->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, env, sizeof(env) - 1);
        close(fd);
        if (k > 0)
            n += has_entry(env, k, mark);
    }
    closedir(d);
    return n;
}

int marked_after(const char *mark, double s)
{
    double end = marked_now() + s;
    int n;
    while ((n = marked_count(mark)) && marked_now() < end)
        usleep(20000);
    return n;
}
