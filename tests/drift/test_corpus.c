/*
 * Tests for drift/corpus: JSONL lines of messages or token ids, the errors
 * a bad line or an empty file gives, the first-difference finder behind
 * the tokenizer check, and the built-in conversations' determinism.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "drift/corpus.h"

static void test_lines(void **state)
{
    (void)state;
    struct drift_item it;
    struct diag d;
    const char *l1 = "[5, 6, 7]";
    assert_int_equal(drift_corpus_parse_line(l1, strlen(l1), "f:1", &it, &d),
                     0);
    assert_int_equal(it.n, 3);
    assert_int_equal(it.ids[2], 7);
    free(it.ids);
    const char *l2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(drift_corpus_parse_line(l2, strlen(l2), "f:2", &it, &d),
                     0);
    assert_non_null(it.messages);
    json_decref(it.messages);
    const char *l3 = "{\"tokens\": [1, -2]}";
    assert_int_equal(drift_corpus_parse_line(l3, strlen(l3), "f:3", &it, &d),
                     -EINVAL);
    assert_non_null(strstr(d.msg, "f:3"));
    const char *l4 = "not json";
    assert_int_equal(drift_corpus_parse_line(l4, strlen(l4), "f:4", &it, &d),
                     -EINVAL);
    assert_non_null(strstr(d.msg, "f:4: not JSON"));
    assert_int_equal(drift_corpus_parse_line("  \n", 3, "f:5", &it, &d),
                     -ENODATA);
    const char *l6 = "{\"text\": \"x\"}";
    assert_int_equal(drift_corpus_parse_line(l6, strlen(l6), "f:6", &it, &d),
                     -EINVAL);
}

static void test_load_empty_and_bad(void **state)
{
    (void)state;
    char path[] = "/tmp/drift-corpus-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    struct drift_corpus c;
    struct diag d;
    drift_corpus_init(&c);
    assert_int_equal(drift_corpus_load(&c, path, &d), -ENODATA);
    assert_non_null(strstr(d.msg, "is empty"));
    assert_true(write(fd, "[1,2]\n\n{oops\n", 13) == 13);
    close(fd);
    assert_int_equal(drift_corpus_load(&c, path, &d), -EINVAL);
    assert_non_null(strstr(d.msg, ":3: not JSON"));
    drift_corpus_release(&c);
    unlink(path);
    assert_int_equal(drift_corpus_load(&c, "/nonexistent/x.jsonl", &d),
                     -ENOENT);
}

static void test_first_diff(void **state)
{
    (void)state;
    uint32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 9, 4};
    assert_int_equal(drift_ids_first_diff(a, 4, a, 4), -1);
    assert_int_equal(drift_ids_first_diff(a, 4, b, 4), 2);
    assert_int_equal(drift_ids_first_diff(a, 4, a, 3), 3);
    assert_int_equal(drift_ids_first_diff(a, 0, b, 0), -1);
}

static void test_builtin_is_seeded(void **state)
{
    (void)state;
    json_t *a = drift_corpus_conversation(7, 1, 3000);
    json_t *b = drift_corpus_conversation(7, 1, 3000);
    json_t *c = drift_corpus_conversation(8, 1, 3000);
    assert_true(json_equal(a, b));
    assert_false(json_equal(a, c));
    assert_true(json_array_size(a) >= 5); /* system + several turns */
    char *s = json_dumps(a, 0);
    assert_non_null(strstr(s, "The "));
    assert_non_null(strstr(s, "\"assistant\""));
    free(s);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_load_empty_and_bad),
        cmocka_unit_test(test_first_diff),
        cmocka_unit_test(test_builtin_is_seeded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
