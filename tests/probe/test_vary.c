/*
 * Unit tests of src/probe/vary.c: `--vary KEY=V1,V2` values read by
 * audit's --expect rule (JSON when it parses, else a string), dotted paths
 * set as nested objects, the product of the cells and its order, and the
 * spec expansion whose labels go into store keys.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "probe/probe_int.h"
#include "probe/vary.h"

static void test_values_json_or_string(void **state)
{
    (void)state;
    struct probe_vary v;
    struct diag d;
    probe_vary_init(&v);
    assert_int_equal(probe_vary_add(&v, "reasoning_effort=high,max", &d), 0);
    assert_int_equal(probe_vary_add(&v, "top_p=0.95,1", &d), 0);
    assert_int_equal(
        probe_vary_add(&v, "chat_template_kwargs.thinking=true,false", &d), 0);
    assert_int_equal(v.n, 3);
    assert_string_equal(json_string_value(json_array_get(v.vals[0], 1)), "max");
    assert_true(json_is_real(json_array_get(v.vals[1], 0)));
    assert_true(json_is_integer(json_array_get(v.vals[1], 1)));
    assert_true(json_is_true(json_array_get(v.vals[2], 0)));
    assert_true(json_is_false(json_array_get(v.vals[2], 1)));
    /* errors leave v as it was */
    assert_int_equal(probe_vary_add(&v, "top_p=0.5", &d), -EEXIST);
    assert_int_equal(probe_vary_add(&v, "nokey", &d), -EINVAL);
    assert_int_equal(probe_vary_add(&v, "=1,2", &d), -EINVAL);
    assert_int_equal(probe_vary_add(&v, "a..b=1", &d), -EINVAL);
    assert_int_equal(probe_vary_add(&v, "seed=1,,2", &d), -EINVAL);
    assert_int_equal(v.n, 3);
    json_t *t = probe_vary_take(&v, "top_p");
    assert_int_equal(json_array_size(t), 2);
    json_decref(t);
    assert_false(probe_vary_has(&v, "top_p"));
    assert_int_equal(v.n, 2);
    probe_vary_release(&v);
}

static void test_product_order_and_labels(void **state)
{
    (void)state;
    struct probe_vary v;
    struct probe_vary_cells c;
    struct diag d;
    probe_vary_init(&v);
    assert_int_equal(probe_vary_add(&v, "reasoning_effort=high,max", &d), 0);
    assert_int_equal(probe_vary_add(&v, "temperature=0.2,0.6", &d), 0);
    probe_vary_cells_build(&v, &c);
    assert_int_equal(c.n, 4);
    assert_string_equal(c.label[0],
                        "reasoning_effort=\"high\" temperature=0.2");
    assert_string_equal(c.label[1],
                        "reasoning_effort=\"high\" temperature=0.6");
    assert_string_equal(c.label[2], "reasoning_effort=\"max\" temperature=0.2");
    assert_string_equal(c.label[3], "reasoning_effort=\"max\" temperature=0.6");
    probe_vary_cells_release(&c);
    probe_vary_release(&v);
    /* nothing varied: one empty cell */
    probe_vary_init(&v);
    probe_vary_cells_build(&v, &c);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.label[0], "");
    probe_vary_cells_release(&c);
}

static void test_dotted_path_nests(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:s,s:{s:b},s:i}", "model", "m",
                             "chat_template_kwargs", "other", 1, "top_k", 3);
    json_t *cell =
        json_pack("{s:b,s:{s:i},s:s}", "chat_template_kwargs.thinking", 0,
                  "x.y", "z", 1, "top_k", "a");
    /* "x.y" is a key holding an object: set at x -> y */
    probe_vary_apply(body, cell);
    json_t *k = json_object_get(body, "chat_template_kwargs");
    assert_true(json_is_false(json_object_get(k, "thinking")));
    assert_true(json_is_true(json_object_get(k, "other")));
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(json_object_get(body, "x"), "y"), "z")),
        1);
    assert_string_equal(json_string_value(json_object_get(body, "top_k")), "a");
    /* a non-object in the way is replaced */
    json_t *c2 = json_pack("{s:i}", "top_k.inner", 5);
    probe_vary_apply(body, c2);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(body, "top_k"), "inner")),
                     5);
    json_decref(c2);
    json_decref(cell);
    json_decref(body);
}

static void test_expand_and_keys(void **state)
{
    (void)state;
    struct probe_vary v;
    struct probe_vary_cells c;
    struct diag d;
    struct probe_spec s[2];
    memset(s, 0, sizeof(s));
    s[0].kind = PROBE_NEEDLE;
    s[0].length = 1024;
    s[0].target = 1024;
    s[1] = s[0];
    s[1].depth = 50;
    probe_vary_init(&v);
    assert_int_equal(probe_vary_add(&v, "top_p=0.95,1", &d), 0);
    probe_vary_cells_build(&v, &c);
    struct probe_spec *out;
    size_t n;
    probe_vary_expand(s, 2, &c, &out, &n);
    assert_int_equal(n, 4);
    assert_int_equal(out[1].depth, 0);
    assert_int_equal(out[2].depth, 50);
    char k0[17], k1[17], kplain[17];
    probe_spec_key(&out[0], "m", 256, NULL, "fp", k0);
    probe_spec_key(&out[1], "m", 256, NULL, "fp", k1);
    probe_spec_key(&s[0], "m", 256, NULL, "fp", kplain);
    assert_string_not_equal(k0, k1);     /* varied fields are in the key */
    assert_string_not_equal(k0, kplain); /* and differ from the plain case */
    /* the request body carries the cell */
    struct probe_case pc;
    memset(&pc, 0, sizeof(pc));
    pc.spec = out[1];
    pc.messages = json_array();
    struct probe_endpoint e;
    probe_endpoint_init(&e, "http://127.0.0.1:1");
    json_t *b = probe_chat_body(&e, &pc, 16);
    assert_int_equal(json_integer_value(json_object_get(b, "top_p")), 1);
    json_decref(b);
    probe_endpoint_release(&e);
    json_decref(pc.messages);
    free(out);
    probe_vary_cells_release(&c);
    probe_vary_release(&v);
}

/* probe_cases_at computes each case of the grid from its index as
 * probe_grid_build and probe_vary_expand list them, repeats per
 * temperature included; its report cell is one per grid cell and vary
 * cell. */
static void test_cases_by_index(void **state)
{
    (void)state;
    struct probe_vary v;
    struct probe_vary_cells c;
    struct diag d;
    probe_vary_init(&v);
    assert_int_equal(probe_vary_add(&v, "top_p=0.9,1", &d), 0);
    probe_vary_cells_build(&v, &c);
    unsigned L[] = {1024, 2048};
    int D[] = {0, 50, 100};
    double T[] = {0, 0.6};
    struct probe_grid_opts o = {.profile = PROBE_QUICK,
                                .kinds =
                                    1u << PROBE_NEEDLE | 1u << PROBE_REASONING,
                                .lengths = L,
                                .n_lengths = 2,
                                .depths = D,
                                .n_depths = 3,
                                .temps = T,
                                .n_temps = 2,
                                .seed = 3};
    struct probe_spec *g, *all;
    size_t n, na;
    assert_int_equal(probe_grid_build(&o, &g, &n, &d), 0);
    probe_vary_expand(g, n, &c, &all, &na);
    struct probe_cases cs;
    assert_int_equal(probe_cases_build(&o, &c, &cs, &d), 0);
    assert_int_equal(cs.n, na);
    assert_true(cs.n_cells < na / 3);
    size_t last = 0;
    for (size_t i = 0; i < na; i++) {
        struct probe_spec s;
        size_t cell = probe_cases_at(&cs, i, &s);
        assert_int_equal(s.kind, all[i].kind);
        assert_int_equal(s.length, all[i].length);
        assert_int_equal(s.target, all[i].target);
        assert_int_equal(s.depth, all[i].depth);
        assert_int_equal(s.variant, all[i].variant);
        assert_true(s.temperature == all[i].temperature);
        assert_int_equal(s.rep, all[i].rep);
        assert_true(s.seed == all[i].seed);
        assert_ptr_equal(s.vary, all[i].vary);
        assert_ptr_equal(s.vary_key, all[i].vary_key);
        assert_int_equal(cell % cs.m, i % cs.m);
        assert_true(cell / cs.m >= last / cs.m);
        last = cell;
    }
    probe_cases_release(&cs);
    free(g);
    free(all);
    probe_vary_cells_release(&c);
    probe_vary_release(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_json_or_string),
        cmocka_unit_test(test_product_order_and_labels),
        cmocka_unit_test(test_dotted_path_nests),
        cmocka_unit_test(test_expand_and_keys),
        cmocka_unit_test(test_cases_by_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
