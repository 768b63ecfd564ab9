/* dumps a store as JSON lines (xchg_to_json), for fixtures */
#include <stdio.h>
#include <jansson.h>
#include "util/rec.h"
int main(int argc, char **argv)
{
    json_t *all = rec_load(argv[1]);
    size_t i; json_t *x;
    if (!all) return 1;
    json_array_foreach(all, i, x) {
        char *s = json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS);
        puts(s);
        free(s);
    }
    return 0;
}
