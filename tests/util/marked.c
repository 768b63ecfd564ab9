/*
 * marked: processes found by an environment marker (see the header).
 */
#include "util/marked.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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
    return marked_pids(mark, NULL, 0);
}

int marked_pids(const char *mark, int *out, int max)
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
        if (k <= 0 || !has_entry(env, k, mark))
            continue;
        int pid = atoi(de->d_name), i = n < max ? n : max;
        for (; out && i > 0 && out[i - 1] > pid; i--)
            if (i < max)
                out[i] = out[i - 1];
        if (out && i < max)
            out[i] = pid;
        n++;
    }
    closedir(d);
    return n;
}

int marked_parent(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY);
    ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (k <= 0)
        return -1;
    buf[k] = '\0';
    const char *p = strrchr(buf, ')');
    int pp;
    return p && sscanf(p + 1, " %*c %d", &pp) == 1 ? pp : -1;
}

int marked_after(const char *mark, double s)
{
    double end = marked_now() + s;
    int n;
    while ((n = marked_count(mark)) && marked_now() < end)
        usleep(20000);
    return n;
}
