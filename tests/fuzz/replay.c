/*
 * replay: a plain driver for the fuzz harnesses, so `make test` runs every
 * committed corpus file through LLVMFuzzerTestOneInput without libFuzzer.
 * Arguments are files or directories of files.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int one(const char *path, unsigned *count)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open '%s'\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(data, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    LLVMFuzzerTestOneInput(data, got);
    free(data);
    (*count)++;
    return 0;
}

int main(int argc, char **argv)
{
    unsigned count = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) {
            fprintf(stderr, "replay: no corpus at '%s'\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= one(argv[i], &count);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.' || !strcmp(de->d_name, "dict"))
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            bad |= one(path, &count);
        }
        if (d)
            closedir(d);
    }
    if (count == 0) {
        fprintf(stderr, "replay: empty corpus\n");
        return 1;
    }
    printf("replayed %u inputs\n", count);
    return bad;
}
